"""cddp.utils.collect_env — torch.utils.collect_env: the environment a bug report needs
(`python -m cddp.utils.collect_env`), from what this process can see: versions of cddp,
NumPy and Python, the OS, the BLAS and CUDA of the build (cddp.__config__.show())."""
import platform
import sys
from collections import namedtuple

SystemEnv = namedtuple("SystemEnv", ["torch_version", "numpy_version", "python_version",
                                     "python_platform", "os", "is_cuda_available",
                                     "cuda_compiled_version", "build_config"])


def get_env_info():
    import numpy
    from .. import __config__, cuda, version
    return SystemEnv(torch_version=version.__version__, numpy_version=numpy.__version__,
                     python_version=sys.version.replace("\n", " "),
                     python_platform=platform.platform(), os=platform.system(),
                     is_cuda_available=cuda.is_available(),
                     cuda_compiled_version=version.cuda, build_config=__config__.show())


def get_pretty_env_info():
    env = get_env_info()
    rows = [("cddp (torch API) version", env.torch_version),
            ("NumPy version", env.numpy_version), ("Python version", env.python_version),
            ("Python platform", env.python_platform),
            ("Is CUDA available", env.is_cuda_available),
            ("CUDA used to build cddp", env.cuda_compiled_version or "None")]
    return "\n".join(f"{k}: {v}" for k, v in rows) + "\n\n" + env.build_config


def main():
    print("Collecting environment information...")
    print(get_pretty_env_info())


if __name__ == "__main__":
    main()
