// Package editdist measures how far a mistyped name is from the ones that
// exist, for refusals that suggest the nearest (an unknown backup ID, an
// unknown Kubernetes resource).
package editdist

// Distance is the Levenshtein distance of two strings, by bytes: the
// fewest single-byte insertions, deletions and substitutions that turn a
// into b.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
