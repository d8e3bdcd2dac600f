"""Package list for setuptools (everything else is in pyproject.toml).

The repository's top-level ``plugins/`` folder ships inside the wheel as
``hermesd/bundled_plugins``, where the plugin loader finds it outside a checkout.
"""

from setuptools import find_packages, setup

BUNDLED = ["hermesd.bundled_plugins"] + [
    f"hermesd.bundled_plugins.{name}" for name in find_packages("plugins")
]

setup(
    packages=find_packages(include=["hermesd", "hermesd.*", "hermesctl", "hermesctl.*"]) + BUNDLED,
    package_dir={"hermesd.bundled_plugins": "plugins"},
)
