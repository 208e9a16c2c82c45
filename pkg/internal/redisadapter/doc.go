// Package redisadapter holds what the two Redis adapters, redisbroker
// (the partitioning contract) and redisstore (the runtime's stores),
// share, so that it is written once:
//
//   - the Lua prelude every script of both starts with (key_type, fence,
//     numcmp) and NewScript, which composes a script from it;
//   - how a call's errors map to the contract's: Unavailable classifies
//     transport failures and "not serving now" replies, Map turns the
//     prelude's and the server's replies into typed errors;
//   - Watch (Subscribe, then Forward), the confirmed pub/sub subscription
//     whose messages both adapters forward as hints.
//
// Every key a script touches is still passed in KEYS by its caller, so
// the Cluster slot checks of each adapter hold.
package redisadapter
