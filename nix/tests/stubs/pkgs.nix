# A stand-in for a nixpkgs package set, for tests on a machine with nixpkgs' lib but no nixpkgs.
#
# Every package is a real (but unbuildable) derivation, so store paths, string contexts and
# `nix flake check --no-build` behave as with nixpkgs. What a builder would have received is
# kept under `stub` (e.g. `runCommand`'s script and environment, `buildEnv`'s extraLibs), for
# tests to inspect or to run themselves. `lib` is nixpkgs' real lib.
{
  lib,
  system ? "x86_64-linux",
}:

let
  inherit (builtins) concatMap filter isAttrs isFunction isList isString;

  # Attributes a derivation can carry (functions and plain sets stay outside it).
  drvAttr = v: !(isFunction v) && (!(isAttrs v) || lib.isDerivation v) && !(isList v && builtins.any isFunction v);

  mkStub =
    name: attrs: passthru:
    let
      drv = derivation (
        {
          inherit name system;
          builder = "/bin/sh";
          args = [ "-c" "echo 'stub package: not buildable without nixpkgs' >&2; exit 1" ];
        }
        // lib.filterAttrs (_: drvAttr) attrs
      );
    in
    drv // { stub = attrs; inherit name; } // passthru;

  mkPython =
    version:
    let
      python = mkStub "python3-${version}" { } {
        pythonVersion = version;
        libPrefix = "python${version}";
        sitePackages = "lib/python${version}/site-packages";
        executable = "python${version}";
        interpreter = "${python}/bin/python${version}";
        pkgs = ps;
        buildEnv = mkBuildEnv { };
        withPackages = f: (mkBuildEnv { }).override { extraLibs = f ps; };
      };

      mkBuildEnv =
        args:
        let
          extraLibs = args.extraLibs or [ ];
        in
        mkStub "${python.name}-env" { postBuild = args.postBuild or ""; paths = ps.requiredPythonModules extraLibs; } {
          override = more: mkBuildEnv (args // more);
          inherit extraLibs python;
          interpreter = "${python}/bin/python${version}";
        };

      hasPythonModule = d: d ? pythonModule && d.pythonModule.outPath == python.outPath;

      mkPythonPackage =
        isModule: args:
        let
          deps = (args.dependencies or [ ]) ++ (args.propagatedBuildInputs or [ ]);
          pname = args.pname or (builtins.parseDrvName args.name).name;
          version = args.version or "0";
          passthru = (args.passthru or { }) // {
            inherit pname version;
            meta = args.meta or { };
            requiredPythonModules = ps.requiredPythonModules deps;
            propagatedBuildInputs = deps;
            overridePythonAttrs = f: mkPythonPackage isModule (args // (if isFunction f then f args else f));
          };
        in
        mkStub (if isModule then "${python.libPrefix}-${pname}-${version}" else "${pname}-${version}")
          { inherit pname version; }
          (passthru // lib.optionalAttrs isModule { pythonModule = python; });

      leaf = pname: version: ps.buildPythonPackage { inherit pname version; };

      ps = {
        inherit python;
        buildPythonPackage = mkPythonPackage true;
        buildPythonApplication = mkPythonPackage false;
        toPythonModule = d: d // { pythonModule = python; requiredPythonModules = ps.requiredPythonModules (d.propagatedBuildInputs or [ ]); };
        toPythonApplication = d: removeAttrs d [ "pythonModule" ];
        requiredPythonModules =
          drvs:
          let
            modules = filter hasPythonModule drvs;
          in
          lib.unique ([ python ] ++ modules ++ concatMap (d: d.requiredPythonModules or [ ]) modules);
        setuptools = leaf "setuptools" "75.0.0";
        wheel = leaf "wheel" "0.44.0";
        pyyaml = leaf "pyyaml" "6.0.2";
        openai = leaf "openai" "3.57.0";
        aiohttp = leaf "aiohttp" "3.14.5";
        msgpack = leaf "msgpack" "1.1.0";
        systemd-python = leaf "systemd-python" "235";
        python-dotenv = leaf "python-dotenv" "1.0.1";
        orjson = leaf "orjson" "3.10.7";
        ruamel-yaml = leaf "ruamel-yaml" "0.18.10";
        tree-sitter = leaf "tree-sitter" "0.26.1";
        croniter = leaf "croniter" "7.0.0";
        mcp = leaf "mcp" "2.3.0";
        genai-prices = leaf "genai-prices" "0.2.3";
        libseccomp = leaf "libseccomp" "2.5.5";
        shtab = leaf "shtab" "1.7.2";
        matrix-nio = leaf "matrix-nio" "0.26.0" // {
          optional-dependencies.e2e = [ (leaf "vodozemac" "0.10.0") ];
        };
        markdown-it-py = leaf "markdown-it-py" "4.0.0";
        python-telegram-bot = leaf "python-telegram-bot" "22.5";
        rich = leaf "rich" "15.0.0";
        prompt-toolkit = leaf "prompt-toolkit" "3.0.52";
        trafilatura = leaf "trafilatura" "2.3.0";
        urllib3 = leaf "urllib3" "2.5.0";
        agent-client-protocol = leaf "agent-client-protocol" "0.12.0";
        starlette = leaf "starlette" "1.0.0";
        uvicorn = leaf "uvicorn" "0.40.0";
        prometheus-client = leaf "prometheus-client" "0.23.1";
        websockets = leaf "websockets" "15.0.1";
        tree-sitter-grammars = {
          tree-sitter-bash = leaf "python-tree-sitter-bash" "0.25.1";
        };
        pytestCheckHook = leaf "pytest-check-hook" "8.3.0";
        pytest-timeout = leaf "pytest-timeout" "2.3.1";
        hypothesis = leaf "hypothesis" "6.100.0";
        pytest = leaf "pytest" "8.3.0";
        requests = leaf "requests" "2.32.3";
      };
    in
    python;

  python312 = mkPython "3.12";
  python313 = mkPython "3.13";

  self = {
    inherit lib system;
    buildPackages = self;
    stdenv.hostPlatform.system = system;

    python3 = python313;
    python3Packages = python313.pkgs;
    inherit python312 python313;
    python312Packages = python312.pkgs;
    python313Packages = python313.pkgs;

    coreutils = mkStub "coreutils-9.5" { } { };
    makeWrapper = mkStub "make-wrapper-hook" { } { };
    nix = mkStub "nix-2.24" { } { };
    ruff = mkStub "ruff-0.6" { } { };
    systemd = mkStub "systemd-256" { } { };

    callPackage =
      f: args:
      let
        fn = if isFunction f then f else import f;
      in
      fn (builtins.intersectAttrs (builtins.functionArgs fn) self // args);

    runCommand = name: env: buildCommand: mkStub name (env // { inherit buildCommand; }) { };
    writeText = name: text: mkStub name { inherit text; } { };
    writeShellScript = name: text: mkStub name { inherit text; } { };
    writeShellScriptBin = name: text: mkStub name { inherit text; } { };
    writeScriptBin = name: text: mkStub name { inherit text; } { };
    mkShell = args: mkStub (args.name or "nix-shell") (removeAttrs args [ "name" "shellHook" ]) { };

    # The type nixpkgs' formats give a YAML/JSON document: attribute sets merge key by key, lists
    # concatenate, two different scalars for one key conflict.
    formats.yaml =
      { }:
      {
        type =
          let
            inherit (lib) types;
            value =
              types.nullOr (
                types.oneOf [
                  types.bool
                  types.int
                  types.float
                  types.str
                  types.path
                  (types.attrsOf value)
                  (types.listOf value)
                ]
              )
              // {
                description = "YAML value";
              };
          in
          value;
        generate = name: value: mkStub name { json = builtins.toJSON value; } { inherit value; };
      };

    testers.runNixOSTest =
      test:
      let
        t = if isFunction test then test { inherit (self) lib; pkgs = self; } else test;
      in
      mkStub "vm-test-run-${t.name}" { } { test = t; };
  };
in
self
