"""What ``outofcore status`` prints: the state of the job writing an output, as lines."""

from __future__ import annotations

from typing import Any

from dask.utils import format_time


def format_status(s: dict[str, Any]) -> str:
    """The state of the job writing an output (``outofcore status``) as lines."""
    total, done = s["tiles_total"] or 0, s["tiles_done"]
    share = f" ({100 * done / total:.0f}%)" if total else ""
    progress = "no tile finished yet"
    if s["last_progress"]:
        progress = (
            f"last tile finished {s['last_progress']} "
            f"({format_time(s['last_progress_seconds_ago'])} ago)"
        )
    lease = s["lease"]
    if lease is None:
        holder = "none" if s["complete"] else "none; rerun the same matmul command to resume"
    elif lease["alive"]:
        holder = (
            f"job {lease['job_id']} (host {lease['host']}, pid {lease['pid']}), heartbeat "
            f"{format_time(lease['heartbeat_seconds_ago'])} ago"
        )
    else:
        holder = (
            f"job {lease['job_id']} (host {lease['host']}, pid {lease['pid']}) is dead: "
            f"{lease['dead_because']}; rerunning the matmul command takes over and resumes"
        )
    return "\n".join(
        [
            f"{s['output']}: {s['state']}, {done} of {total} tiles done{share}",
            f"  started        {s['started']} (journal {s['journal_id']}, {s['runs']} run(s), "
            f"tiles {s['tile'][0]}x{s['tile'][1]}, panels {s['tk']} deep)",
            f"  progress       {progress}",
            *(
                [f"  split-k        {s['partials_done']} part(s) of split tiles recorded"]
                if s.get("partials_done")
                else []
            ),
            f"  lease          {holder}",
            f"  complete       {_complete(s)}",
        ]
    )


def _complete(s: dict[str, Any]) -> str:
    """The status's ``complete`` line: yes (and when), or no (and why, when its job
    document says otherwise)."""
    if s["complete"]:
        return "yes" + (f", {s['completed']}" if s.get("completed") else "")
    if s.get("claims_complete"):
        return (
            "no: its job document says complete, but only "
            f"{s['tiles_done']} of {s['tiles_total']} tiles are recorded (edited or damaged); "
            "rerun with --overwrite to start over"
        )
    return "no"
