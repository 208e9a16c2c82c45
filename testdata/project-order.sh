#!/bin/sh
# An example exec handler for testdata/node.yaml. protctl runs it once per
# message: the envelope (JSON) on stdin, the metadata in the environment.
# Exit 0 when done, 75 to be called again later (a dependency is down),
# anything else when this message cannot be handled (it is retried, then
# its partition is parked).
set -eu
envelope=$(cat)
echo "order ${PROTCTL_PARTITION} at ${PROTCTL_POSITION} (generation ${PROTCTL_GENERATION}, attempt ${PROTCTL_ATTEMPT}): ${envelope}" >&2
