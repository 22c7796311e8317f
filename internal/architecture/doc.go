// Package architecture holds no code: its test reads Steward's import graph
// (`go list`) and fails when a layering rule of docs/ARCHITECTURE.md is
// broken.
package architecture
