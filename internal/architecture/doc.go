// Package architecture holds no code: its tests read Steward's import graph
// (`go list`) and fail when a layering rule of docs/ARCHITECTURE.md is
// broken, and read the libraries' string literals and fail when one names a
// steward command beyond the allowlist of what is left to move.
package architecture
