"""Where the workers' output goes: torchrun's --log-dir, -r/--redirects, -t/--tee and
--local-ranks-filter (torch/distributed/elastic/multiprocessing/api.py, DefaultLogsSpecs).

A redirect or tee value is a digit for every local rank or a map LOCAL_RANK:DIGIT,... where the
digit is 0 (nothing), 1 (stdout), 2 (stderr) or 3 (both). A redirected stream goes to its file
only, a teed one to its file and to the launcher's console; --local-ranks-filter keeps the other
local ranks off the console (their files are still written). The layout is torch's:

    LOG_DIR/<run id>_<random>/attempt_<restart>/<local rank>/{stdout.log, stderr.log, error.json}

With --log-dir every rank gets its error.json there (torch's TORCHELASTIC_ERROR_FILE), even
without a redirect; with a redirect or tee but no --log-dir the base is a new temporary
directory, whose path the launcher prints. Those files are the user's: they stay after the job.
"""
import os
import re
import tempfile

OUT, ERR = 1, 2
_VALUE = re.compile(r"^[0-3]$")
_MAPPING = re.compile(r"^(\d+:[0-3],)*(\d+:[0-3])$")


def parse_std(text, option):
    """'3' -> 3 (every local rank); '0:1,1:2' -> {0: 1, 1: 2}; anything else: ValueError."""
    text = text.strip()
    if _VALUE.match(text):
        return int(text)
    if _MAPPING.match(text):
        return {int(k): int(v) for k, v in (m.split(":") for m in text.split(","))}
    raise ValueError(f"{option}={text} is neither a digit 0-3 (0 none, 1 stdout, 2 stderr, "
                     f"3 both) nor LOCAL_RANK:DIGIT,... (e.g. 0:3,1:2)")


def _of(spec, local_rank):
    return spec.get(local_rank, 0) if isinstance(spec, dict) else spec


class RankLogs:
    """One local rank's destinations for one attempt: per stream a file path or None and
    whether its lines reach the console; the error file path or None (the launcher's own)."""

    def __init__(self, stdout, stderr, show_out, show_err, error_file):
        self.files = (stdout, stderr)
        self.show = (show_out, show_err)
        self.error_file = error_file


class LogSpecs:
    """The parsed options; `attempt()` makes one attempt's directories."""

    def __init__(self, log_dir, redirects, tee, local_ranks_filter):
        self.log_dir = log_dir
        self.redirects = parse_std(redirects, "--redirects")
        self.tee = parse_std(tee, "--tee")
        self.filter = local_ranks_filter          # set of local ranks, or None for all
        self.run_dir = None
        self.uses_files = bool(log_dir) or self.redirects != 0 or self.tee != 0

    def attempt(self, run_id, restart, nproc):
        """[RankLogs] for local ranks 0..nproc-1; creates the directories it names. Returns
        (list, announce) where announce is the run directory when it was just created."""
        announce = None
        if self.uses_files and self.run_dir is None:
            base = self.log_dir or tempfile.mkdtemp(prefix="cddp_logs_")
            os.makedirs(base, exist_ok=True)
            if not os.path.isdir(base):
                raise NotADirectoryError(f"--log-dir {base} is not a directory")
            self.run_dir = announce = tempfile.mkdtemp(prefix=f"{run_id}_", dir=base)
        out = []
        for lr in range(nproc):
            shown = self.filter is None or lr in self.filter
            if self.run_dir is None:
                out.append(RankLogs(None, None, shown, shown, None))
                continue
            rank_dir = os.path.join(self.run_dir, f"attempt_{restart}", str(lr))
            os.makedirs(rank_dir, exist_ok=True)
            tee = _of(self.tee, lr)
            to_file = _of(self.redirects, lr) | tee
            files, show = [], []
            for bit, name in ((OUT, "stdout.log"), (ERR, "stderr.log")):
                files.append(os.path.join(rank_dir, name) if to_file & bit else None)
                show.append(shown and (not to_file & bit or bool(tee & bit)))
            out.append(RankLogs(files[0], files[1], show[0], show[1],
                                os.path.join(rank_dir, "error.json")))
        return out, announce
