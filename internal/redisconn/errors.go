package redisconn

import "errors"

// ErrInvalidURL is wrapped by New, Check and ParseSentinelURL for a Redis
// URL they cannot use: an unknown scheme, a sentinel URL without a master
// name or with an empty address, an option that would send commands to a
// replica. The message says what to change; it never holds the URL's
// password.
var ErrInvalidURL = errors.New("redisconn: invalid Redis URL")

// ErrClusterSentinel is wrapped by New and Check when a Sentinel URL is
// asked for with the cluster layout: Sentinel watches one primary, Redis
// Cluster fails over by itself, and no client speaks both.
var ErrClusterSentinel = errors.New("redisconn: the cluster layout cannot use Sentinel")
