// Package convert translates between the Bigtable protos and the engine's models; it is part of the server boundary.
package convert
