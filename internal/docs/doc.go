// Package docs holds the tests that keep the tables of facts in docs/*.md
// to the code that states those facts: a table that drifts from the code
// fails a test naming the row to add or remove. It has no code of its own.
package docs
