"""The shell parser under the approval table: every simple command, its words unquoted."""

from __future__ import annotations

from hermesd.approvals import commands, shell

HOME = "/home/ann"


def argvs(text: str, cwd: str | None = None) -> list[list[str | None]]:
    return [[w.value for w in c.words] for c in shell.parse(text, HOME, cwd).commands]


def test_every_line_and_control_operator_starts_a_command() -> None:
    assert argvs("true\nrm -rf x; a && b || c | d & e") == [
        ["true"],
        ["rm", "-rf", "x"],
        ["a"],
        ["b"],
        ["c"],
        ["d"],
        ["e"],
    ]


def test_control_words_and_substitutions_hold_commands() -> None:
    text = "if a; then b; fi; for i in 1; do ! c; done; x=$(d) y `e` <(f); case z in z) g;; esac"
    names = [argv[0] for argv in argvs(text)]
    assert {"a", "b", "c", "d", "e", "f", "g"} <= set(names)


def test_quotes_and_escapes_are_removed() -> None:
    assert argvs(r"""'r'm "-r"f \/ r\m $'\x2f' "a b" x\ y""") == [
        ["rm", "-rf", "/", "rm", "/", "a b", "x y"]
    ]


def test_home_and_known_variables_expand_and_unknown_ones_do_not() -> None:
    assert argvs('echo ~ ~/x "$HOME" ${HOME}/y $UNSET "$(id)"')[-1] == [
        "echo",
        HOME,
        f"{HOME}/x",
        HOME,
        f"{HOME}/y",
        None,
        None,
    ]


def test_assignments_on_the_line_are_followed_in_order() -> None:
    assert argvs("X=rm; $X -rf y")[-1] == ["rm", "-rf", "y"]
    # assigned only on one branch: could be either, so unknown
    assert argvs("if c; then X=ls; else X=rm; fi; $X")[-1] == [None]


def test_cd_gives_later_commands_their_directory() -> None:
    script = shell.parse("cd /srv && ls; cd ..; pwd; (cd /tmp); ls", HOME)
    assert [c.cwd for c in script.commands] == [None, "/srv", "/srv", "/", "/", "/"]


def test_brace_expansion_unquoted_only() -> None:
    assert argvs("rm /{bin,usr} '{a,b}' x{1..3}") == [
        ["rm", "/bin", "/usr", "{a,b}", "x1", "x2", "x3"]
    ]


def test_pipes_and_heredocs_say_where_stdin_comes_from() -> None:
    script = shell.parse("curl x | sh\ncat <<EOF | bash\nrm -rf /\nEOF\nsh <<< 'ls'", HOME)
    sh, cat, bash, here = (script.commands[i] for i in (1, 2, 3, 4))
    assert sh.stdin == "pipe" and "curl" in sh.upstream
    assert cat.stdin == "heredoc" and bash.stdin == "pipe" and bash.fed == "rm -rf /\n"
    assert here.stdin == "herestring" and here.fed == "ls"


def test_a_syntax_error_is_reported_not_raised() -> None:
    assert shell.parse('echo "unterminated', HOME).unsure
    assert not shell.parse("echo fine", HOME).unsure


def test_paths_are_canonicalised_lexically() -> None:
    for raw in ("//", "/./", "/tmp/../", "/usr/..", "///."):
        assert shell.canonical_path(raw, HOME, None) == "/"
    assert shell.canonical_path("~/", HOME, None) == HOME
    assert shell.canonical_path("x/../y", HOME, "/srv") == "/srv/y"
    assert shell.canonical_path("x", HOME, None) is None


def test_wrappers_are_stripped_to_the_program_they_run() -> None:
    cmd = shell.parse("sudo -u bob nice -n 5 timeout -s KILL 10 env -i A=1 /bin/rm -rf x", HOME)
    invs, _ = commands.invocations(cmd.commands[0])
    assert [i.name for i in invs] == ["sudo", "nice", "timeout", "env", "rm"]
    assert invs[-1].env == {"A": "1"} and [w.value for w in invs[-1].args] == ["-rf", "x"]


def test_xargs_and_find_reach_the_command_they_run() -> None:
    find = shell.parse("find . -exec rm {} + -exec grep x {} ;", HOME).commands[0]
    assert [i.name for i in commands.invocations(find)[0]] == ["find", "rm", "grep"]
    fed = shell.parse("echo / | xargs rm -rf", HOME).commands[1]
    rm = commands.invocations(fed)[0][-1]
    assert rm.name == "rm" and [w.value for w in rm.args] == ["-rf", "/"]


def test_command_v_is_a_lookup_not_a_run() -> None:
    cmd = shell.parse("command -v rm", HOME).commands[0]
    assert [i.name for i in commands.invocations(cmd)[0]] == ["command"]


def test_where_interpreters_read_their_code() -> None:
    def code(text: str) -> str:
        inv = commands.invocations(shell.parse(text, HOME).commands[-1])[0][-1]
        found = commands.code_of(inv)
        return found.kind if found else "-"

    assert code("python -W ignore -c 'x'") == "inline"
    assert code("perl -MFile::Path -le 'x'") == "inline"
    assert code("python3 -m pytest") == ""
    assert code("python3 app.py") == "file"
    assert code("cat x | python3") == "stdin"
    assert code("python3") == ""  # the terminal gives it /dev/null
    assert code("bash -o pipefail -c 'ls'") == "inline"
    assert code("bash script.sh") == "file"
    assert code("bash <(curl x)") == "stdin"
    assert code("ls") == "-"
