#!/bin/sh
# A ChainSync persistent worker in POSIX shell (docs/WORKERS.md):
#
#   chainsync run --worker ... -- sh worker.sh [FILE]
#
# For every round it appends "NODE ROUND PID ID" to FILE (default: none).
# It reads the node's lines with shell patterns, which works because the
# node writes compact JSON with "id" first, and round ids without quotes
# or backslashes; a worker that must take any round id parses JSON.
out=${1:-/dev/null}
while IFS= read -r line; do
	id=${line#'{"id":'}
	id=${id%%[!0-9]*}
	case $line in
	*'"op":"hello"'*)
		printf '{"id":%s,"ok":true,"version":1}\n' "$id" ;;
	*'"op":"run"'*)
		round=${line#*'"round":"'}
		round=${round%%'"'*}
		if printf '%s %s %s %s\n' "$CHAINSYNC_NODE" "$round" "$$" "$id" >>"$out"; then
			printf '{"id":%s,"ok":true}\n' "$id"
		else
			printf '{"id":%s,"ok":false,"error":"cannot append to the output file"}\n' "$id"
		fi ;;
	esac # cancel: each request is quick here, nothing to stop
done
