package stripesim

import "slices"

// pageAround is the page of all (sorted newest first by cmp) next to the
// cursor on its side: after it (older) for starting_after, before it
// (newer) for ending_before, at most limit of them; hasMore says whether
// more lie beyond the page on that side. Every list endpoint pages so.
func pageAround[T any](all []T, cursor T, after, before string, limit int, cmp func(a, b T) int) (page []T, hasMore bool) {
	page = all
	switch {
	case after != "":
		i, found := slices.BinarySearchFunc(all, cursor, cmp)
		if found {
			i++
		}
		page = all[i:]
	case before != "":
		i, _ := slices.BinarySearchFunc(all, cursor, cmp)
		page = all[:i]
	}
	hasMore = len(page) > limit
	if hasMore && before != "" {
		page = page[len(page)-limit:]
	} else if hasMore {
		page = page[:limit]
	}
	return page, hasMore
}
