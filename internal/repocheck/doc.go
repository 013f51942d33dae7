// Package repocheck holds the checks `make test` runs over the repository
// itself rather than over its code: what may be tracked by git. Its tests run
// them against this checkout, so a build output committed by mistake fails
// CI instead of shipping to every clone.
package repocheck
