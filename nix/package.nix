# hermesd and hermesctl, built from pyproject.toml (name, version and entry points come from it).
#
#   pkgs.callPackage ./nix/package.nix { }
#   pkgs.callPackage ./nix/package.nix { python3Packages = pkgs.python312Packages; }
#
# The bundled plugins (plugins/ of the repository, e.g. the calculator) are installed as
# hermesd/bundled_plugins, where hermesd looks for them when it does not run from a checkout.
# The NixOS module puts this package into one Python environment with the plugins' packages;
# `passthru.python` is the interpreter that environment must be built from.
{
  lib,
  python3Packages,
}:

let
  project = (builtins.fromTOML (builtins.readFile ../pyproject.toml)).project;

  # The repository minus what a checkout accumulates (virtualenvs, caches, build output).
  unwanted = [
    ".git" ".venv" "__pycache__" ".hypothesis" ".pytest_cache" ".ruff_cache" ".mypy_cache"
    "hermesd.egg-info" "build" "dist" "result" ".ci" "bench"
  ];
  src = lib.cleanSourceWith {
    name = "hermesd-source";
    src = ../.;
    filter = path: type: !(builtins.elem (baseNameOf path) unwanted)
      && !(lib.hasSuffix ".pyc" path);
  };

  ps = python3Packages;
  # nixpkgs renamed the binding to systemd-python (its PyPI name) in November 2025.
  systemd-python = ps.systemd-python or ps.systemd;
  # openai[aiohttp]: the SDK and the HTTP client hermesd runs it on
  # the approval table parses commands with tree-sitter's Python binding and nixpkgs' Python
  # package of the bash grammar (python3Packages.tree-sitter-grammars.tree-sitter-bash)
  dependencies = [
    ps.pyyaml ps.openai ps.aiohttp ps.msgpack systemd-python ps.python-dotenv ps.orjson ps.ruamel-yaml
    ps.tree-sitter ps.tree-sitter-grammars.tree-sitter-bash
    ps.shtab  # hermesctl completion
    ps.croniter
    ps.mcp  # hermesd.mcp: the MCP client (nixpkgs must carry the 2.x series, see pyproject.toml)
    ps.genai-prices  # hermesd.model.pricing: the offline price table
    # hermesd.sandbox.seccomp: libseccomp's own binding (module seccomp), whose API pyseccomp
    # (pyproject.toml, not in nixpkgs) copies; the module imports whichever is there
    ps.libseccomp
    # hermesd.gateway.matrix: the Matrix client, with its e2e extra (encrypted rooms), and the
    # markdown renderer of its answers
    ps.matrix-nio ps.markdown-it-py
    ps.python-telegram-bot  # hermesd.gateway.telegram
    ps.rich ps.prompt-toolkit  # hermesctl chat: markdown on a terminal, the toolbar editor
    ps.trafilatura ps.urllib3  # web_extract: HTML to text, GETs through the egress proxy
    ps.agent-client-protocol  # hermesctl acp
    ps.starlette ps.uvicorn ps.prometheus-client  # the HTTP door, /metrics
    ps.websockets  # hermesd.tools.cdp: a browser provider's DevTools websocket
  ] ++ (ps.matrix-nio.optional-dependencies.e2e or [ ]);
  build-system = [ ps.setuptools ps.wheel ];
  checkInputs = [ ps.pytest ps.pytest-timeout ps.hypothesis ];
in
ps.buildPythonApplication {
  pname = project.name;
  inherit (project) version;
  pyproject = true;
  inherit src;

  inherit build-system dependencies;

  postInstall = ''
    # the units' Documentation= points here
    install -Dm644 -t "$out/share/doc/hermesd" README.md docs/*.md
    # the manual pages scripts/gen-man renders from the parsers
    install -Dm644 man/hermesctl.1 "$out/share/man/man1/hermesctl.1"
    install -Dm644 man/hermesd.8 "$out/share/man/man8/hermesd.8"
    bundled="$out/${ps.python.sitePackages}/hermesd/bundled_plugins"
    if [ -d plugins ] && [ ! -e "$bundled" ]; then
      cp -r plugins "$bundled"
      find "$bundled" -name __pycache__ -prune -exec rm -rf {} +
    fi
  '';

  # The suite starts real daemons on Unix sockets under /tmp and a scripted model server on
  # 127.0.0.1, both of which the build sandbox provides. Tests needing what it lacks skip
  # themselves: nix, systemd-analyze, systemd-socket-activate, root (other-uid peers), the
  # plugin guide beside the repository. `hermesd.overridePythonAttrs { doCheck = false; }`
  # turns it off.
  doCheck = true;
  nativeCheckInputs = [ ps.pytestCheckHook ] ++ checkInputs;
  preCheck = ''
    export HOME="$(mktemp -d)"
    # Test daemons run `python -m hermesd` from a temporary directory: they need the installed copy.
    export PYTHONPATH="$out/${ps.python.sitePackages}:$PYTHONPATH"
  '';
  pythonImportsCheck = [ "hermesd.daemon" "hermesctl.cli" ];

  passthru = {
    inherit (ps) python;
    # An interpreter with every dependency, for working on a checkout (the flake's devShell).
    devPython = ps.python.withPackages (_: dependencies ++ build-system ++ checkInputs);
  };

  meta = {
    description = "Hermes-compatible AI agent daemon with a msgpack-RPC Unix socket";
    license = lib.licenses.mit;
    mainProgram = "hermesd";
    platforms = lib.platforms.linux;
  };
}
