// Package server builds kgc's HTTP handler: health, readiness and the debug
// views of the ownership graph. BuildMux is a pure function of its inputs,
// so every endpoint is tested with httptest.
//
// The graph endpoint (GraphPath) serves upstream's Graphviz document by
// default and the graphapi JSON form with ?format=json or
// "Accept: application/json". Both take the same filters:
//
//	?uid=U (repeatable)                    the connected components of those objects
//	?kind=K&name=N[&namespace=NS][&apiVersion=G/V]
//	                                       the component of that object
//	?namespace=NS                          the namespace's objects and the owners
//	                                       and dependents directly connected to them
//
// Bad parameters get 400 and unknown objects 404, except upstream's DOT
// ?uid= query, which stays an empty graph as upstream serves it. The
// handler reads the Source's graph through the graph's display readers,
// in batches of graph.ViewBatch nodes per read-lock hold, so a 100k-node
// view never blocks the graph's writer for long.
//
// HistoryPath serves the record of kgc's writes (package history) as JSON,
// oldest first, when the Source keeps one (HistorySource):
//
//	?uid=U        writes to that object, or resting on that owner
//	?namespace=NS&name=N
//	              writes to objects with that namespace and/or name
//	?limit=N      only the newest N of those
//
// An unknown parameter, one given twice, or a bad limit gets 400; a kgc
// that keeps no history answers 404.
//
// ShadowPath serves shadow mode's comparison with the cluster's own
// collector (package shadow) as JSON, when the Source runs in shadow mode
// (ShadowSource): the counts and the latest disagreements, filtered as the
// history is; otherwise 404.
//
// UIPath serves the web view: embedded HTML, CSS and JavaScript (no
// external resources, enforced by a Content-Security-Policy) that draws
// the JSON graph.
package server
