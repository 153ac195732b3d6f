"""cddp.hub — torch.hub: pretrained weights by URL, and entry points from a hubconf.py.

    sd = cddp.hub.load_state_dict_from_url(url)         # cached under get_dir()/checkpoints
    cddp.hub.download_url_to_file(url, dst, hash_prefix) # atomic: dst appears whole or not at all
    model = cddp.hub.load(path, "name", source="local") # hubconf.py of a local directory

The cache is torch's: $TORCH_HOME/hub (default $XDG_CACHE_HOME/torch/hub, i.e.
~/.cache/torch/hub), so weights torch already downloaded are found, and cddp.load reads
torch's checkpoint files. A file name carrying a hash ("resnet18-f37072fd.pth") is checked
against the SHA-256 of the download with check_hash=True, as torch does.

A download is written as cddp.save writes: into an unnamed file (O_TMPFILE) in the target's
directory, renamed over the target only once complete and its hash checked, so an interrupted
(even killed) or corrupt download leaves no file behind, never a half-written checkpoint.

Differences from torch: source="github" (fetching a repository and running its hubconf.py)
raises NotImplementedError naming source="local"; `tqdm` is the tqdm package when installed,
else a minimal progress bar (which, unlike torch's stand-in, can also wrap an iterable).
"""
import errno
import hashlib
import importlib.util
import os
import re
import sys
import urllib.parse
import urllib.request
import warnings
from urllib.error import HTTPError, URLError  # noqa: F401  (torch.hub's module names)
from urllib.parse import urlparse  # noqa: F401
from urllib.request import Request, urlopen  # noqa: F401

from .serialization import _atomic_write, load as _load

__all__ = ["download_url_to_file", "get_dir", "help", "list", "load",
           "load_state_dict_from_url", "set_dir"]

HASH_REGEX = re.compile(r"-([a-f0-9]*)\.")
ENV_TORCH_HOME = "TORCH_HOME"
ENV_XDG_CACHE_HOME = "XDG_CACHE_HOME"
DEFAULT_CACHE_DIR = "~/.cache"
READ_DATA_CHUNK = 128 * 1024
_hub_dir = None

try:
    from tqdm import tqdm
except ImportError:
    class tqdm:  # noqa: N801  (torch.hub's name)
        """A minimal progress bar on stderr: total/update/close, a context manager, and an
        iterable wrapper when given one."""

        def __init__(self, iterable=None, total=None, disable=False, unit=None, *args,
                     **kwargs):
            self.iterable, self.total, self.disable, self.unit = iterable, total, disable, unit
            self.n = 0
            if total is None and iterable is not None and hasattr(iterable, "__len__"):
                self.total = len(iterable)

        def update(self, n=1):
            if self.disable:
                return
            self.n += n
            if self.total:
                sys.stderr.write(f"\r{100 * self.n / float(self.total):.1f}%")
            else:
                sys.stderr.write(f"\r{self.n} {self.unit or 'it'}")
            sys.stderr.flush()

        def set_description(self, *args, **kwargs):
            pass

        def set_postfix(self, *args, **kwargs):
            pass

        def write(self, s):
            sys.stderr.write(f"{s}\n")

        def close(self):
            self.disable = True

        def __iter__(self):
            for item in self.iterable:
                yield item
                self.update(1)
            self.close()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            if not self.disable:
                sys.stderr.write("\n")
            self.close()


def _check_module_exists(name):
    """Whether module `name` can be imported (hubconf dependency checks)."""
    import importlib.util
    return importlib.util.find_spec(name) is not None


def _get_torch_home():
    return os.path.expanduser(os.getenv(ENV_TORCH_HOME, os.path.join(
        os.getenv(ENV_XDG_CACHE_HOME, DEFAULT_CACHE_DIR), "torch")))


def get_dir():
    """The hub cache directory: set_dir's, else $TORCH_HOME/hub."""
    if os.getenv("TORCH_HUB"):
        warnings.warn("TORCH_HUB is deprecated, please use env TORCH_HOME instead")
    if _hub_dir is not None:
        return _hub_dir
    return os.path.join(_get_torch_home(), "hub")


def set_dir(d):
    """Use d (a path) as the hub cache directory from now on."""
    global _hub_dir
    _hub_dir = os.path.expanduser(os.fspath(d))


class _Once:
    """The download's chunks for the atomic writer, which re-iterates its parts only on its
    rare retry without O_TMPFILE: a stream cannot be read twice, so that retry fails loudly
    (a second call then succeeds) instead of writing an empty file."""

    def __init__(self, chunks):
        self.chunks = chunks

    def __iter__(self):
        chunks, self.chunks = self.chunks, None
        if chunks is None:
            raise RuntimeError("download_url_to_file: this filesystem could not take the "
                               "download atomically on the first try; call it again")
        return chunks


def download_url_to_file(url, dst, hash_prefix=None, progress=True):
    """Download url to the path dst; with hash_prefix, the file's SHA-256 hex digest must
    start with it (RuntimeError otherwise, and dst is not written). The bytes go through
    cddp.save's atomic writer: an unnamed file beside dst, renamed over it when complete."""
    req = urllib.request.Request(url, headers={"User-Agent": "torch.hub"})
    sha256 = hashlib.sha256() if hash_prefix is not None else None

    def chunks(u, bar):
        while True:
            buf = u.read(READ_DATA_CHUNK)
            if not buf:
                break
            if sha256 is not None:
                sha256.update(buf)
            bar.update(len(buf))
            yield buf
        if sha256 is not None:               # before the rename: a bad file never lands
            digest = sha256.hexdigest()
            if digest[:len(hash_prefix)] != hash_prefix:
                raise RuntimeError(f'invalid hash value (expected "{hash_prefix}", got '
                                   f'"{digest}")')

    with urllib.request.urlopen(req) as u:
        size = u.headers.get("Content-Length") if getattr(u, "headers", None) else None
        total = int(size) if size and size.isdigit() else None
        with tqdm(total=total, disable=not progress, unit="B") as bar:
            _atomic_write(os.path.expanduser(dst), _Once(chunks(u, bar)))


def load_state_dict_from_url(url, model_dir=None, map_location=None, progress=True,
                             check_hash=False, file_name=None, weights_only=False):
    """The object saved at url (a state dict, typically), downloaded once into
    model_dir (default get_dir()/checkpoints) and read with cddp.load."""
    if os.getenv("TORCH_MODEL_ZOO"):
        warnings.warn("TORCH_MODEL_ZOO is deprecated, please use env TORCH_HOME instead")
    if model_dir is None:
        model_dir = os.path.join(get_dir(), "checkpoints")
    try:
        os.makedirs(model_dir)
    except OSError as e:
        if e.errno != errno.EEXIST:
            raise
    filename = file_name or os.path.basename(urllib.parse.urlparse(url).path)
    cached_file = os.path.join(model_dir, filename)
    if not os.path.exists(cached_file):
        sys.stderr.write(f'Downloading: "{url}" to {cached_file}\n')
        hash_prefix = None
        if check_hash:
            m = HASH_REGEX.search(filename)
            hash_prefix = m.group(1) if m else None
        download_url_to_file(url, cached_file, hash_prefix, progress=progress)
    return _load(cached_file, map_location=map_location, weights_only=weights_only)


def _local_hubconf(repo_dir):
    path = os.path.join(repo_dir, "hubconf.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Cannot find hubconf.py in {repo_dir}")
    spec = importlib.util.spec_from_file_location("hubconf", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, repo_dir)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(repo_dir)
    return module


def _hubconf(repo_or_dir, source):
    if source not in ("github", "local"):
        raise ValueError(f'Unknown source: "{source}". Allowed values: "github" | "local".')
    if source == "github":
        raise NotImplementedError("cddp.hub: source='github' (downloading a repository and "
                                  "running its hubconf.py) is not supported; clone the "
                                  "repository and pass its directory with source='local'")
    return _local_hubconf(repo_or_dir)


def _entry(module, model):
    fn = getattr(module, model, None)
    if fn is None or not callable(fn):
        raise RuntimeError(f"Cannot find callable {model} in hubconf")
    return fn


def list(repo_or_dir, force_reload=False, skip_validation=False, trust_repo=None,  # noqa: A001
         verbose=True, source="local"):
    """The entry points (public callables) of a local hubconf.py."""
    module = _hubconf(repo_or_dir, source)
    return [f for f in dir(module) if callable(getattr(module, f)) and not f.startswith("_")]


def help(repo_or_dir, model, force_reload=False, skip_validation=False,  # noqa: A001
         trust_repo=None, source="local"):
    """The docstring of a local hubconf.py's entry point."""
    return _entry(_hubconf(repo_or_dir, source), model).__doc__


def load(repo_or_dir, model, *args, source="github", trust_repo=None, force_reload=False,
         verbose=True, skip_validation=False, **kwargs):
    """hubconf.py's entry point `model` called with args/kwargs (source='local' only)."""
    return _entry(_hubconf(repo_or_dir, source), model)(*args, **kwargs)
