// Package rules holds the rules that keep the module's layout what
// docs/development.md draws, and the test that checks them on every run:
//
//   - every package sits in one layer (Layers), and imports only packages
//     of its own layer or below: data and calls flow from the wire types
//     up to the commands, never back;
//   - a public package (one with no internal path element) imports nothing
//     of the module's internal/, so that internal/ sits above the public
//     line; testenv alone may (FrontEnd): it runs the whole processor, as
//     cmd/processor does;
//   - a stage (stages/<name>, but the Shared packages beside the stages)
//     imports no other stage and no storage backend: it learns its
//     successor from the pipeline table and reaches state only through the
//     kv interfaces;
//   - operator code (the operator API and the console) imports no stage;
//   - a public package (one with no internal path element) exposes no
//     internal type in any exported declaration, so that what users import
//     never makes them name what they cannot import;
//   - every relative link and image of every tracked Markdown file
//     resolves, headings' anchors included (TestMarkdownLinksResolve).
//
// The checks are pure functions over a package graph (Check, Exposed), so
// that their own tests plant violations in made-up graphs and see each
// rule fail; TestModule runs them over the real module (`go list`, and the
// compiler's export data read with go/types for the public signatures).
//
// This package is tooling: no production code imports it.
package rules
