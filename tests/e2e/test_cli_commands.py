"""Plugin CLI commands: ``hermesctl <name> …`` forwarded to the daemon (``cli.list``,
``cli.run``)."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir, start_daemon
from tests.support.plugin_factory import write_plugin

CLI_PLUGIN = """
import asyncio, sys, time

print("register-time output goes to the daemon's own stdout")

def setup(parser):
    sub = parser.add_subparsers(dest="action", required=True)
    say = sub.add_parser("say", help="print words")
    say.add_argument("words", nargs="+")
    say.add_argument("--times", type=int, default=1)
    say.add_argument("--pause", type=float, default=0.0)
    sub.add_parser("warn", help="write to stderr")
    ex = sub.add_parser("exit", help="sys.exit with a code")
    ex.add_argument("code")
    sub.add_parser("boom", help="raise")
    sub.add_parser("hang", help="never finish")

def handle(args):
    if args.action == "say":
        for i in range(args.times):
            print(" ".join(args.words), i)
            sys.stdout.flush()
            time.sleep(args.pause)
        return 0
    if args.action == "warn":
        print("careful", file=sys.stderr)
        return 3
    if args.action == "exit":
        sys.exit(int(args.code) if args.code.isdigit() else args.code)
    if args.action == "boom":
        raise RuntimeError("kaput")
    if args.action == "hang":
        time.sleep(30)

def setup_async(parser):
    parser.add_argument("n", type=int)

async def handle_async(args):
    await asyncio.sleep(0.01)
    print("async", args.n * 2)

def setup_func(parser):
    parser.add_argument("--name", default="world")
    parser.set_defaults(func=lambda args: print(f"hello {args.name}"))

def register(ctx):
    ctx.register_cli_command("tool-x", "Manage tool X", setup, handle,
                             description="Tool X manager")
    ctx.register_cli_command("twice", "Double a number", setup_async, handle_async)
    ctx.register_cli_command("greet", "Greet someone", setup_func)
    ctx.register_cli_command("status", "Clashes with hermesctl status", setup, handle)
"""


@pytest.fixture(scope="module")
def cli() -> Iterator[DaemonProcess]:
    """One daemon for the module: these tests only read its state (and its log)."""
    home = short_tmpdir()
    write_plugin(home / "plugins", "clip", CLI_PLUGIN)
    daemon = start_daemon(
        home, config="commands:\n  cli_timeout: 1\n", env={"HERMES_BUNDLED_PLUGINS": "/nonexistent"}
    )
    yield daemon
    daemon.stop()


def ctl(daemon: DaemonProcess, *args: str):
    return run_hermesctl(["--socket", str(daemon.socket), *args])


def test_hermesctl_forwards_a_plugin_command_and_prints_its_output(cli) -> None:
    proc = ctl(cli, "tool-x", "say", "hello", "there", "--times", "2")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "hello there 0\nhello there 1\n", "")


def test_stderr_and_the_returned_status_come_back_separately(cli) -> None:
    proc = ctl(cli, "tool-x", "warn")
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "", "careful\n")


def test_help_prints_the_plugins_argparse_help_with_hermesctl_prog(cli) -> None:
    proc = ctl(cli, "tool-x", "--help")
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: hermesctl tool-x [-h] {say,warn,exit,boom,hang}")
    assert "Tool X manager" in proc.stdout


def test_a_usage_error_prints_usage_and_exits_2(cli) -> None:
    proc = ctl(cli, "tool-x", "say")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("usage: hermesctl tool-x say")
    assert "error: the following arguments are required: words" in proc.stderr


@pytest.mark.parametrize(
    ("code", "status", "stderr"), [("0", 0, ""), ("7", 7, ""), ("bad-state", 1, "bad-state\n")]
)
def test_sys_exit_in_a_handler_becomes_the_exit_status_and_the_daemon_keeps_running(
    cli, code: str, status: int, stderr: str
) -> None:
    proc = ctl(cli, "tool-x", "exit", code)
    assert (proc.returncode, proc.stderr) == (status, stderr)
    assert cli.alive() and cli.call("ping")["pong"] is True


def test_a_raising_handler_exits_1_with_one_line_and_the_traceback_in_the_log(cli) -> None:
    proc = ctl(cli, "tool-x", "boom")
    assert proc.returncode == 1
    assert proc.stderr == "hermesctl tool-x: error: RuntimeError: kaput\n"
    assert "Traceback" in cli.log() and "RuntimeError: kaput" in cli.log()


def test_an_async_handler_is_run_to_completion(cli) -> None:
    proc = ctl(cli, "twice", "21")
    assert (proc.returncode, proc.stdout) == (0, "async 42\n")


def test_args_func_is_used_when_there_is_no_handler_fn(cli) -> None:
    assert ctl(cli, "greet", "--name", "Ada").stdout == "hello Ada\n"


def test_a_hanging_handler_is_bounded_by_cli_timeout(cli) -> None:
    began = time.monotonic()
    proc = ctl(cli, "tool-x", "hang")
    assert time.monotonic() - began < 10
    assert proc.returncode == 124 and "did not finish within 1s" in proc.stderr
    assert ctl(cli, "greet").stdout == "hello world\n"


def test_concurrent_calls_capture_their_own_output_only(cli) -> None:
    def one(i: int) -> dict:
        with cli.client() as c:
            return c.call(
                "cli.run",
                {"argv": ["tool-x", "say", f"caller{i}", "--times", "5", "--pause", "0.02"]},
            )

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    for i, result in enumerate(results):
        assert result == {
            "stdout": "".join(f"caller{i} {n}\n" for n in range(5)),
            "stderr": "",
            "exit_status": 0,
        }


def test_handler_output_never_reaches_the_daemons_own_stdout(cli) -> None:
    ctl(cli, "tool-x", "say", "only-for-the-client")
    log = cli.log()
    assert "only-for-the-client" not in log
    assert "register-time output goes to the daemon's own stdout" in log


def test_a_cli_name_clashing_with_a_hermesctl_subcommand_is_refused_with_a_warning(cli) -> None:
    names = [c["name"] for c in cli.call("cli.list")["commands"]]
    assert names == ["tool-x", "twice", "greet"]
    assert (
        "Plugin 'clip' tried to register CLI command 'status' which conflicts with a "
        "built-in command. Skipping."
    ) in cli.log()
    assert ctl(cli, "status").stdout.startswith("hermesd ")  # hermesctl's own status


def test_cli_list_gives_name_help_description_and_plugin(cli) -> None:
    first = cli.call("cli.list")["commands"][0]
    assert first == {
        "name": "tool-x",
        "help": "Manage tool X",
        "description": "Tool X manager",
        "plugin": "clip",
    }


def test_hermesctl_help_lists_plugin_commands_when_the_daemon_is_up(cli) -> None:
    proc = ctl(cli, "--help")
    assert proc.returncode == 0
    assert "plugin commands (from the daemon):" in proc.stdout
    assert "tool-x  Manage tool X" in proc.stdout


def test_hermesctl_help_still_works_when_the_daemon_is_down() -> None:
    proc = run_hermesctl(["--socket", "/tmp/no-such-hermesd.sock", "--help"])
    assert proc.returncode == 0 and "COMMAND" in proc.stdout
    assert "plugin commands" not in proc.stdout


def test_an_unknown_command_is_a_usage_error(cli) -> None:
    proc = ctl(cli, "frobnicate", "x")
    assert proc.returncode == 2 and "unknown command 'frobnicate'" in proc.stderr
    assert "tool-x" in proc.stderr


def test_an_unknown_command_without_a_daemon_says_the_daemon_is_needed() -> None:
    proc = run_hermesctl(["--socket", "/tmp/no-such-hermesd.sock", "tool-x"])
    assert proc.returncode == 3 and "plugin commands need the daemon" in proc.stderr


@pytest.mark.parametrize("argv", [[], [1, 2], ["nope"]])
def test_cli_run_with_bad_argv_is_a_clear_error(cli, argv: list) -> None:
    with pytest.raises(RpcError) as err:
        cli.call("cli.run", {"argv": argv})
    assert err.value.code in (Codes.INVALID_PARAMS, Codes.NOT_FOUND)
    assert cli.call("ping")["pong"] is True


@pytest.mark.parametrize(
    ("shell", "needle"),
    [
        ("bash", "complete -o filenames -F _hermesctl_with_plugins hermesctl"),
        ("zsh", "#compdef hermesctl"),
        ("fish", "complete -c hermesctl"),
    ],
)
def test_completion_prints_a_script_for_each_shell(shell: str, needle: str) -> None:
    proc = run_hermesctl(["completion", shell])
    assert proc.returncode == 0 and needle in proc.stdout


def test_bash_completes_plugin_commands_beside_subcommands_when_the_daemon_is_up(cli) -> None:
    from tests.support.completion import bash_complete, completion_env

    offered = set(bash_complete(completion_env(cli), "t"))
    assert {"tools", "tool-x", "twice"} <= offered


def test_completion_names_include_plugin_commands_when_the_daemon_is_up(cli) -> None:
    names = run_hermesctl(
        ["completion", "names"], env={"HERMES_SOCKET": str(cli.socket)}
    ).stdout.split()
    assert {"status", "plugins", "cmd", "tool-x", "twice"} <= set(names)
