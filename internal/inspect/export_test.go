package inspect

// WithPipelinedReads makes an Inspector read partitions with pipelined
// commands even on a single server, as it does on a cluster.
func WithPipelinedReads() Option { return func(c *config) { c.pipelined = true } }

// ScriptsRefused reports whether in fell back to pipelined reads.
func (in *Inspector) ScriptsRefused() bool { return in.scriptsRefused.Load() }
