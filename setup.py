"""Where each installed package's source lives; the metadata is in pyproject.toml.

The repository keeps one folder per part (`proofpool/` the core library, `backend/`, `worker/`,
`validator/`, `trainer/` the services, `cli/` and `devnet/` the applications), and installs them
all under the `proofpool` name (`proofpool.backend`, `proofpool.cli`, ...), so a wheel adds one
top-level package to site-packages. Every subpackage of a folder is found here, so a new one needs
no entry.
"""

from setuptools import find_packages, setup

FOLDERS = {
    "proofpool": "proofpool",
    "proofpool.backend": "backend",
    "proofpool.worker": "worker",
    "proofpool.validator": "validator",
    "proofpool.trainer": "trainer",
    "proofpool.cli": "cli",
    "proofpool.devnet": "devnet",
}

setup(
    package_dir=FOLDERS,
    packages=[
        name
        for package, folder in FOLDERS.items()
        for name in [package, *(f"{package}.{sub}" for sub in find_packages(folder))]
    ],
)
