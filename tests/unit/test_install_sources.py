"""Which sources ``plugins install`` accepts, and git run so that it only fetches."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hermesd.plugins import install as installer
from hermesd.plugins.install import InstallError, install, resolve_source
from tests.support.plugin_factory import write_plugin


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("fd::17", "git remote helpers ('fd::') are not allowed"),
        ("fd::0.git", "git remote helpers ('fd::') are not allowed"),
        ("ext::sh -c touch% /tmp/pwned", "git remote helpers ('ext::') are not allowed"),
        ("ext::sh -c id .git", "git remote helpers ('ext::') are not allowed"),
        ("rsh::host/x", "git remote helpers ('rsh::') are not allowed"),
        ("-uhelp", "starts with '-'"),
        ("--upload-pack=touch /tmp/x", "starts with '-'"),
        ("http://example.com/x.git", "git transport 'http://' is not allowed"),
        ("ftp://example.com/x.git", "git transport 'ftp://' is not allowed"),
        ("git+ssh://host/x.git", "git transport 'git+ssh://' is not allowed"),
        ("FILE:///tmp/x", "git transport 'FILE://' is not allowed"),
        ("ssh://-oProxyCommand=touch%20x/y", "names a host starting with '-'"),
        ("me@-oProxyCommand=x:repo", "neither a folder, a git URL nor owner/repo"),
        ("host:repo.git", "neither a folder, a git URL nor owner/repo"),
        ("https://example.com/x\nfd::1", "control characters"),
    ],
)
def test_sources_outside_the_allowed_transports_are_refused_before_git_runs(
    source: str, needle: str
) -> None:
    with pytest.raises(InstallError) as err:
        resolve_source(source)
    assert err.value.kind == "source" and needle in str(err.value)


@pytest.mark.parametrize(
    "source",
    [
        "https://github.com/owner/repo.git",
        "ssh://git@example.com/owner/repo.git",
        "git@github.com:owner/repo.git",
        "git://example.com/repo.git",
        "file:///srv/git/repo",
        "repo.git",
        "https://example.com/a::b",  # '::' after a scheme is a path, not a helper
    ],
)
def test_sources_of_the_allowed_transports_go_to_git_unchanged(source: str) -> None:
    assert resolve_source(source) == ("git", source)


def test_the_owner_repo_shorthand_is_github_over_https() -> None:
    assert resolve_source("owner/repo") == ("git", "https://github.com/owner/repo.git")


def test_a_local_folder_is_copied_not_cloned(tmp_path: Path) -> None:
    assert resolve_source(str(tmp_path)) == ("folder", str(tmp_path.resolve()))


def test_installing_fd_17_is_an_error_and_leaves_nothing(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    with pytest.raises(InstallError, match="remote helpers"):
        install(plugins, "fd::17")
    assert not plugins.exists() or list(plugins.iterdir()) == []


def test_git_itself_refuses_the_ext_transport_if_a_source_got_past_the_check(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(InstallError, match="git clone failed") as err:
        installer.git(["clone", "--", f"ext::sh -c touch% {marker}", str(tmp_path / "tree")])
    assert "transport 'ext' not allowed" in str(err.value)
    assert not marker.exists()


def test_git_refuses_a_protocol_off_the_list(tmp_path: Path) -> None:
    with pytest.raises(InstallError, match="transport 'http' not allowed"):
        installer.git(["clone", "--", "http://127.0.0.1:9/x.git", str(tmp_path / "tree")])


def test_a_file_url_still_clones(tmp_path: Path) -> None:
    repo = write_plugin(tmp_path, "notes")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=repo,
            check=True,
            capture_output=True,
        )
    done = install(tmp_path / "plugins", f"file://{repo}")
    assert done.name == "notes" and (done.path / "plugin.yaml").is_file()


def test_a_manifest_asking_for_ld_preload_is_not_installed(tmp_path: Path) -> None:
    source = write_plugin(
        tmp_path / "src", "preload", manifest="name: preload\nrequires_env: [LD_PRELOAD]\n"
    )
    with pytest.raises(InstallError, match="LD_PRELOAD may not be set"):
        install(tmp_path / "plugins", str(source))
    assert list((tmp_path / "plugins").iterdir()) == []
