#!/bin/sh
# requeue-dead.sh WORKFLOW [REASON]: trigger a run of WORKFLOW, wait for it to end, and requeue
# its DEAD tasks. Needs only ffctl (configured by FLOWFORGE_* variables) and its -o json, which
# is indented two spaces, one field per line, so sed and grep read it without jq.
set -eu
wf=${1:?usage: requeue-dead.sh WORKFLOW [REASON]}
run=$(ffctl run trigger "$wf" -o json | sed -n 's/^  "id": "\(.*\)",$/\1/p'); [ -n "$run" ] || exit 1
if out=$(ffctl run wait "$run" --timeout "${WAIT_TIMEOUT:-30m}" -o json); then echo "run $run SUCCEEDED"; exit 0; fi
printf '%s\n' "$out" | grep -q '^  "state": "FAILED",$' || { echo "run $run did not end FAILED: nothing to requeue" >&2; exit 1; }
ffctl dead requeue --all --run "$run" --reason "${2:-requeued by requeue-dead.sh}" --yes -o json
