# Sourced by the workflow scripts (and steps): run a command whose output holds a run
# file's text — a case id, a vLLM version, a label, a reason, an issue title — with
# GitHub's workflow commands stopped. A line of it starting `::error::`, `::add-mask::`
# or `::stop-commands::` is then printed as text, never acted on by the runner.
#
#   run_content COMMAND [ARG...]     # its exit status is the command's
#
# `::stop-commands::TOKEN` turns commands off until a line `::TOKEN::`; the token is
# fresh and random each time, so the printed text cannot name it and turn them back on.
# The script's own `::warning::` lines stay outside run_content.

run_content() {
    local token status=0
    token="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
    echo "::stop-commands::$token"
    "$@" || status=$?
    echo "::$token::"
    return "$status"
}

# COMMAND's output to the log and appended to the job summary ($summary), for run_content:
# the pipeline ends before run_content turns commands back on.
tee_summary() {
    "$@" | tee -a "${summary:-/dev/null}"
}
