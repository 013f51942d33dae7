package main

import "github.com/outboxkit/outboxkit/postgres"

// disableNotify maps what was postgres.Config.DisableNotify to
// Config.Notify: off, or the store's default (NOTIFY in Add's statement).
// The measured after-commit modes send their own notifications
// (newAfterCommit), so they use a store that sends none.
func disableNotify(off bool) postgres.NotifyMode {
	if off {
		return postgres.NotifyOff
	}
	return postgres.NotifyInTransaction
}
