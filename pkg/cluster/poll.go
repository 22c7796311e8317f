package cluster

import (
	"context"
	"time"
)

// Poll calls f every interval until it returns true, an error, or ctx ends.
func Poll(ctx context.Context, interval time.Duration, f func(context.Context) (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := f(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
