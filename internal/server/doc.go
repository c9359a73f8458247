// Package server builds kgc's HTTP handler: health, readiness and the debug
// views of the ownership graph. BuildMux is a pure function of its inputs,
// so every endpoint is tested with httptest.
package server
