package collector

import "errors"

// errInvalidReference marks an ownerReference that can never be resolved
// (malformed apiVersion). It is not retried.
var errInvalidReference = errors.New("invalid owner reference")

func isInvalidReference(err error) bool { return errors.Is(err, errInvalidReference) }
