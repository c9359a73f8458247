// Package inspect answers the three questions people ask about garbage
// collection, with kgc's own semantics:
//
//   - Explain: why is this object not deleted (or why will it be)?
//   - PreviewDelete: what will deleting this object remove, in which order,
//     and what will block? (a dry run: it never writes)
//   - BuildTree: what owns what?
//
// The logic reads the world through a View, which has two implementations:
// LiveView reads object metadata from the API server (GET and paginated
// LIST only), and ServerView reads a running kgc's ownership graph in the
// graphapi JSON form. Decisions are kgc's own: ownerReferences are
// classified exactly as the collector classifies them, and verdicts come
// from the collector's pure decision functions.
package inspect
