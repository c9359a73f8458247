// Package conventions has no code: its tests hold the repository to the
// conventions a compiler does not check.
//
//   - Comments, strings, test names, file names and documents state their
//     reasons themselves: they never cite a tracker's numbers or say how
//     the work was organised, which a reader of the code cannot open
//     (trackers_test.go).
//   - Every package of the root module imports only the packages
//     docs/architecture.md says it may, and that page lists every package
//     (imports_test.go).
//   - Every relative link of a Markdown file leads to a file, and to a
//     heading of it where it names one (links_test.go).
package conventions
