"""SLURM's environment as init_process_group and the launcher read it (pure Python, no cddp).

Under `srun`, every task has SLURM_PROCID (its rank), SLURM_NTASKS (the world size),
SLURM_LOCALID (its rank on its node) and SLURM_JOB_NODELIST (the job's hosts in SLURM's
compressed form, "node[01-04,07],gpu3"); there is no MASTER_ADDR/MASTER_PORT. Like the
recipes torch users write by hand (and Lightning's SLURM environment), the first host of the
node list hosts the store and the port comes from the job id, so every task computes the same
address without talking first.
"""
import os

__all__ = ["first_host", "default_port", "in_slurm_step"]


def _split_top(text):
    """Split on the commas that are not inside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def first_host(nodelist):
    """The first host of a SLURM node list ("node[01-04,07],gpu3" -> "node01"; ranges keep
    their zero padding, several bracket groups each take their first value), or None."""
    items = _split_top(nodelist or "")
    if not items:
        return None
    expr, out, i = items[0], [], 0
    while i < len(expr):
        if expr[i] == "[":
            j = expr.find("]", i)
            if j < 0:
                return None                     # malformed: no closing bracket
            first = expr[i + 1:j].split(",")[0].split("-")[0].strip()
            if not first:
                return None
            out.append(first)
            i = j + 1
        else:
            out.append(expr[i])
            i += 1
    return "".join(out) or None


def default_port(job_id):
    """A port every task of the job agrees on: 15000 + the job id's last 4 digits (the range
    Lightning uses), inside the unprivileged range and away from the ephemeral one."""
    try:
        return 15000 + int(str(job_id)[-4:]) % 10000
    except ValueError:
        return 29500


def in_slurm_step():
    """True inside a task started by srun (SLURM_PROCID is set per task)."""
    return "SLURM_PROCID" in os.environ and "SLURM_NTASKS" in os.environ
