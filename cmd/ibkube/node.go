package main

import (
	"context"
	"errors"
)

// runNode is a placeholder until its area lands; its owner replaces this file.
func runNode(_ context.Context, _ []string, _ stdio) error {
	return errors.New("ibkube node: not implemented yet")
}
