"""Package list for setuptools (everything else is in pyproject.toml).

The repository's top-level ``plugins/`` folder ships inside the wheel as
``hermesd/bundled_plugins``, where the plugin loader finds it outside a checkout. Every folder
in it is listed (as a namespace package where it has no ``__init__.py``, e.g. a skill's folder)
so that setuptools copies its files without warning that a folder would be ignored. The same
goes for data folders of hermesd itself (the web page's ``hermesd/http/web/``).
"""

from setuptools import find_namespace_packages, setup

BUNDLED = ["hermesd.bundled_plugins"] + [
    f"hermesd.bundled_plugins.{name}"
    for name in find_namespace_packages("plugins", exclude=["*__pycache__*"])
]

setup(
    packages=find_namespace_packages(
        include=["hermesd", "hermesd.*", "hermesctl", "hermesctl.*"], exclude=["*__pycache__*"]
    )
    + BUNDLED,
    package_dir={"hermesd.bundled_plugins": "plugins"},
)
