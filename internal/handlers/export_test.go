package handlers

// RestartDelay is restartDelay, for the tests.
var RestartDelay = restartDelay
