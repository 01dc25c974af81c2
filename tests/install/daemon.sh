# SPDX-License-Identifier: Apache-2.0
# Shared by the install tests (sourced): messages, and a kvtierd started in
# the background as $DPID, waited for and stopped.

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "--- $* (${SECONDS}s)"; }

# Wait until the kvtierd of $DPID answers `CLI stats` on SOCKET; its output
# is in LOG.
kvtd_wait_answering() { # CLI SOCKET LOG
	for _ in $(seq 200); do
		"$1" stats --socket "$2" >/dev/null 2>&1 && return 0
		kill -0 "$DPID" 2>/dev/null || { cat "$3"; fail "kvtierd exited"; }
		sleep 0.05
	done
	cat "$3"
	fail "kvtierd does not answer on $2"
}

# SIGTERM to $DPID, which must then exit 0; its output is in LOG.
kvtd_stop() { # LOG
	local rc=0
	kill -TERM "$DPID"
	wait "$DPID" || rc=$?
	DPID=
	[ "$rc" = 0 ] || { cat "$1"; fail "kvtierd exited $rc after SIGTERM"; }
}
