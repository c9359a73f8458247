// Package ui tests kgc's web view (/ui) in headless Chromium against a real
// kube-apiserver: the page draws the live ownership graph with each object's
// state, search finds objects, and clicking focuses a component.
//
// It needs Debian's chromium at /usr/bin/chromium and skips without it,
// unless KGC_REQUIRE_CHROMIUM=1 (set by .ci/run), which makes it fail.
// KGC_UI_SCREENSHOT=path also writes the screenshot there.
package ui
