// Package app holds kgc's cobra commands. Commands are built by functions
// that take the function to run, so flag parsing, defaults and validation
// are tested without starting a collector.
package app
