package main

import (
	"context"
	"errors"
)

// runDoctor is a placeholder until its area lands; its owner replaces this file.
func runDoctor(_ context.Context, _ []string, _ stdio) error {
	return errors.New("ibkube doctor: not implemented yet")
}
