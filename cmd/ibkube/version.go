package main

import (
	"context"
	"fmt"

	"github.com/ibkube/ibkube/internal/version"
)

func runVersion(_ context.Context, _ []string, s stdio) error {
	_, err := fmt.Fprintln(s.out, version.Version)
	return err
}
