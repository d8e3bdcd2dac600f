# The options services.hermes-agent (NixOS, ./module.nix) and programs.hermes-agent
# (Home-Manager, ./home-manager.nix) share, and what both build from them: hermesd's one Python
# environment (extraPythonPackages), the checked folder of extraPlugins, and config.yaml rendered
# from `settings` and checked with hermesd's schema. Each module adds its own options (the NixOS
# user, group, state directory and socket) and units.
#
# Called as `import ./options.nix { inherit lib pkgs cfg optionPath; }` with the module's own `cfg`;
# `options` goes under the module's option path, `settings` is merged into `cfg.settings`.
{
  lib,
  pkgs,
  cfg,
  optionPath, # where the module declares these, e.g. "services.hermes-agent", for messages
}:

let
  inherit (lib)
    mkIf
    mkOption
    literalExpression
    types
    ;

  settingsFormat = pkgs.formats.yaml { };


  # --- Python: hermesd plus extraPythonPackages, one environment ---------------------------------

  python = cfg.package.python or pkgs.python3;
  ps = python.pkgs;
  # An application is left out of Python environments; as a module its entry points are found.
  hermesdModule = ps.toPythonModule cfg.package;
  extraPython = cfg.extraPythonPackages ps;

  isForeign = p: !(p ? pythonModule) || p.pythonModule.outPath != python.outPath;
  foreignPython = builtins.filter isForeign extraPython;
  describeForeign =
    p:
    if p ? pythonModule then
      "${p.name} is built for ${p.pythonModule.libPrefix or p.pythonModule.name}"
    else
      "${p.name or "a package"} is not a Python module (wrap an application with ps.toPythonModule)";

  requiredModules = ps.requiredPythonModules or (drvs: drvs);
  envCheck =
    pkgs.runCommand "hermes-agent-python-env-check"
      {
        nativeBuildInputs = [ pkgs.buildPackages.python3 ];
        roots = builtins.toJSON {
          inherit (python) sitePackages;
          roots = map (p: {
            name = p.pname or p.name;
            closure = map toString (requiredModules [ p ]);
          }) ([ hermesdModule ] ++ extraPython);
        };
        passAsFile = [ "roots" ];
      }
      ''
        python3 ${./check_python_env.py} "$rootsPath"
        touch "$out"
      '';
  pythonEnv =
    python.buildEnv.override {
      extraLibs = [ hermesdModule ] ++ extraPython;
      # Referencing the check makes it a build input: a version conflict fails with its message
      # before buildEnv reports a bare file collision.
      postBuild = ''
        # distributions checked by ${envCheck}
      '';
    }
    // {
      conflictCheck = envCheck;
    };

  # --- directory plugins ---------------------------------------------------------------------------

  labelOf =
    p:
    if lib.isDerivation p then
      p.meta.homepage or p.url or (lib.head (p.urls or [ p.name ]))
    else
      toString p;
  # Into the store with it: derivations and path literals are, so are absolute path strings
  # outside the store (the build cannot see the host's file system).
  storePathOf =
    p:
    if lib.isDerivation p || builtins.isPath p || lib.hasPrefix builtins.storeDir (toString p) then
      "${p}"
    else
      "${/. + p}";
  pluginSources = lib.unique (
    map (p: {
      path = storePathOf p;
      label = labelOf p;
    }) cfg.extraPlugins
  );
  pluginDir =
    pkgs.runCommand "hermes-agent-plugins"
      {
        nativeBuildInputs = [ (pkgs.buildPackages.python3.withPackages (p: [ p.pyyaml ])) ];
        sources = builtins.toJSON pluginSources;
        passAsFile = [ "sources" ];
      }
      ''
        python3 ${./link_plugins.py} "$sourcesPath" "$out"
      '';

  # --- config.yaml -----------------------------------------------------------------------------------

  configFile =
    pkgs.runCommand "hermes-agent-config.yaml"
      { rendered = settingsFormat.generate "config.yaml" cfg.settings; }
      ''
        cp "$rendered" "$out"
        ${pythonEnv}/bin/python3 ${./check_config.py} "$out" ${lib.escapeShellArg "${optionPath}.settings"}
      '';

in
{
  inherit
    settingsFormat
    python
    pythonEnv
    pluginDir
    configFile
    foreignPython
    describeForeign
    ;

  # What each module writes into its own `settings` from the options below.
  settings = {
    log_level = cfg.logLevel;
    http = mkIf cfg.http.enable (
      { inherit (cfg.http) listen; }
      // lib.optionalAttrs (cfg.http.tokenFile != null) { token_file = cfg.http.tokenFile; }
    );
    gateway = mkIf (cfg.gateway.platforms != { }) {
      platforms = lib.mapAttrs (_: p: lib.filterAttrs (_: v: v != null) (
        (builtins.removeAttrs p [ "enable" "tokenFile" "passwordFile" "owners" "allow" ])
        // {
          enabled = p.enable;
          token_file = p.tokenFile;
          password_file = p.passwordFile;
          owners = p.owners;
          allow = p.allow;
        }
      )) cfg.gateway.platforms;
    };
    mcp_servers = mkIf (cfg.mcpServers != { }) (
      lib.mapAttrs (_: server: lib.filterAttrs (_: v: v != null) (server // {
        command =
          if server.command == null then null
          else if lib.isDerivation server.command then lib.getExe server.command
          else "${server.command}";
      })) cfg.mcpServers
    );
  };

  options = {
    package = mkOption {
      type = types.package;
      default = pkgs.callPackage ./package.nix { };
      defaultText = literalExpression "pkgs.callPackage ./nix/package.nix { }";
      example = literalExpression ''
        pkgs.callPackage ./nix/package.nix { python3Packages = pkgs.python312Packages; }
      '';
      description = ''
        The hermesd package (hermesd and hermesctl). Its Python (`passthru.python`) is the one
        the service's environment is built from, so `extraPythonPackages` must be built for it.
      '';
    };


    settings = mkOption {
      type = settingsFormat.type;
      default = { };
      example = literalExpression ''
        {
          model = {
            base_url = "http://127.0.0.1:8080/v1";
            default = "qwen2.5-7b-instruct";
          };
          approvals.mode = "manual";
          plugins.disabled = [ "calculator" ];
          cron.timezone = "Europe/Berlin";
        }
      '';
      description = ''
        hermesd's `config.yaml`, as Nix values; definitions from several modules are merged.
        Checked against hermesd's schema at build time. The module sets `log_level`, `http`,
        `gateway` and `mcp_servers` from its own options (the NixOS service also `socket.path`,
        `socket.mode` and `socket.group`). It ends up in the world-readable Nix store: put API
        keys in `environmentFiles`, never here.
      '';
    };

    # MCP servers (docs/mcp.md): the reference module's option, rendered as settings.mcp_servers
    mcpServers = mkOption {
      type = types.attrsOf (
        types.submodule {
          freeformType = settingsFormat.type;
          options.command = mkOption {
            type = types.nullOr (types.oneOf [ types.str types.package types.path ]);
            default = null;
            example = literalExpression "pkgs.mcp-server-time";
            description = ''
              The stdio server's program: a string, a package (its `meta.mainProgram`, through
              `lib.getExe`) or a path (copied into the Nix store).
            '';
          };
        }
      );
      default = { };
      example = literalExpression ''
        {
          time = { command = pkgs.mcp-server-time; args = [ "--local-timezone" "UTC" ]; };
          docs = { url = "https://mcp.example.org/mcp"; headers.Authorization = "Bearer ''${DOCS_TOKEN}"; };
        }
      '';
      description = ''
        MCP servers whose tools the agent may use, by name: the same attributes as
        `settings.mcp_servers` (stdio `command`, `args`, `env`, `cwd`; HTTP `url`, `headers`,
        `transport`; `timeout`, `connect_timeout`, `enabled`, `tools.include`/`exclude`,
        `approval`, `trusted`). Put secrets in `environmentFiles` and refer to them as
        `''${NAME}`: the values are expanded when a server connects, never stored here.
      '';
    };

    environmentFiles = mkOption {
      type = types.listOf (types.strMatching "-?/.+");
      default = [ ];
      example = [ "/run/secrets/hermes.env" ];
      description = ''
        Files of `NAME=value` lines (e.g. `OPENAI_API_KEY=sk-...`) read by systemd when the
        service starts (`EnvironmentFile=`); a leading `-` makes a file optional. Give them as
        strings so they are never copied into the Nix store; keep them mode 0600 and out of
        version control (sops-nix, agenix, or a file you place by hand). Variables a plugin's
        `requires_env` names count as present when they are set here.
      '';
    };

    extraPlugins = mkOption {
      type = types.listOf (types.either types.package types.path);
      default = [ ];
      example = literalExpression ''
        [
          (pkgs.fetchFromGitHub {
            name = "hermes-weather";
            owner = "you";
            repo = "hermes-weather";
            rev = "v1.0.0";
            hash = "sha256-...";
          })
          ./plugins/my-local-plugin
        ]
      '';
      description = ''
        Directory plugins: each a folder with `plugin.yaml` and `__init__.py` (a fetcher's
        result, a derivation or a path). They are linked into one folder by name (the
        manifest's `name`, else the folder's), checked at build time, and handed to hermesd
        through `HERMES_PLUGIN_PATH`. Declared plugins are enabled even when `settings`
        has a `plugins.enabled` list. Two plugins with one name fail the build; since fetchers
        call their folder `source`, give a fetcher a `name` when the manifest has none.
      '';
    };

    extraPythonPackages = mkOption {
      type = types.coercedTo (types.listOf types.package) (list: _: list) (
        types.functionTo (types.listOf types.package)
      );
      default = _: [ ];
      defaultText = literalExpression "ps: [ ]";
      example = literalExpression ''
        ps: [
          (ps.buildPythonPackage {
            pname = "hermes-plugin-echo";
            version = "1.0.0";
            pyproject = true;
            src = pkgs.fetchFromGitHub {
              owner = "you";
              repo = "hermes-plugin-echo";
              rev = "v1.0.0";
              hash = "sha256-...";
            };
            build-system = [ ps.setuptools ];
          })
        ]
      '';
      description = ''
        Python packages installed next to hermesd in its one Python environment, typically
        plugins with a `hermes_agent.plugins` entry point. A function from hermesd's Python
        package set (`ps: [ ... ]`) or a plain list; packages must be built for hermesd's
        Python (`package.python`). Two different versions of one distribution fail the build;
        shared dependencies at the same version are fine. With a `plugins.enabled` list in
        `settings`, list their entry-point names there too.
      '';
    };

    # The HTTP door (docs/clients.md): off by default; opens no firewall port either way.
    http = {
      enable = mkOption {
        type = types.bool;
        default = false;
        example = true;
        description = ''
          Serve the HTTP door (OpenAI-compatible API, session API, /metrics) on `http.listen`.
          Nothing is opened in the firewall: keep it on loopback and put a TLS proxy in front.
        '';
      };
      listen = mkOption {
        type = types.str;
        default = "127.0.0.1:8642";
        example = "[::1]:8642";
        description = "HOST:PORT the HTTP door listens on (`http.listen` in config.yaml).";
      };
      tokenFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/run/secrets/hermes-http-tokens";
        description = ''
          The bearer tokens, one a line, `NAME:TOKEN` for a member (`http.token_file`). A path
          outside the Nix store: tokens are secrets. Without it only /health answers.
        '';
      };
    };

    # Chat platforms (docs/gateway.md): gateway.platforms.<name> in config.yaml
    gateway.platforms = mkOption {
      type = types.attrsOf (types.submodule {
        freeformType = settingsFormat.type;
        options = {
          enable = mkOption {
            type = types.bool;
            default = true;
            description = "Run this platform's adapter.";
          };
          tokenFile = mkOption {
            type = types.nullOr types.str;
            default = null;
            example = "/run/secrets/telegram-bot-token";
            description = ''
              A file holding the bot's token or access token (`token_file`): a path outside
              the Nix store, readable by the service's user. Tokens never go in `settings`.
            '';
          };
          passwordFile = mkOption {
            type = types.nullOr types.str;
            default = null;
            example = "/run/secrets/hermes-matrix-password";
            description = ''
              A file holding the account's password (`password_file`), for a platform that
              logs in with one instead of a token (Matrix). A path outside the Nix store.
            '';
          };
          owners = mkOption {
            type = types.listOf types.str;
            default = [ ];
            example = [ "123456789" ];
            description = "Platform user ids that act as the daemon's owner.";
          };
          allow = mkOption {
            type = types.listOf types.str;
            default = [ ];
            description = "Platform user ids that act as a member (`as_user`, default nobody).";
          };
        };
      });
      default = { };
      example = lib.literalExpression ''
        { telegram = { tokenFile = "/run/secrets/telegram-bot"; owners = [ "123456789" ]; }; }
      '';
      description = ''
        Chat platforms by name (`telegram`, `matrix`, or a plugin's): other keys (e.g.
        `home_channel`, `homeserver`) pass through to config.yaml's `gateway.platforms.<name>`.
      '';
    };

    extraArgs = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [ "--socket" "/run/hermes/other.sock" ];
      description = "Extra command-line arguments for hermesd (see `hermesd --help`).";
    };

    memoryHigh = mkOption {
      type = types.nullOr types.str;
      default = "1536M";
      example = "4G";
      description = ''
        `MemoryHigh=` of the units: above it the kernel reclaims hard and hermesd slows down
        (a plugin growing without bound is named in the log first). `null`: no limit.
      '';
    };

    memoryMax = mkOption {
      type = types.nullOr types.str;
      default = "2G";
      example = "8G";
      description = ''
        `MemoryMax=` of the units: at it the kernel kills hermesd and systemd restarts it.
        Keep it above `memoryHigh`. `null`: no limit.
      '';
    };

    logLevel = mkOption {
      type = types.enum [ "DEBUG" "INFO" "WARNING" "ERROR" ];
      default = "INFO";
      example = "DEBUG";
      description = ''
        hermesd's log level (`log_level` in config.yaml, so it survives a reload). Logs go to
        the journal: `journalctl -u hermesd` (a user's: `journalctl --user -u hermesd`).
      '';
    };

    pythonEnv = mkOption {
      type = types.package;
      readOnly = true;
      default = pythonEnv;
      defaultText = literalExpression "python.buildEnv with hermesd and extraPythonPackages";
      description = ''
        The Python environment the service runs (hermesd, its dependencies and
        `extraPythonPackages`), e.g. for
        `''${config.services.hermes-agent.pythonEnv}/bin/hermesd --check-config` (under
        Home-Manager `config.programs.hermes-agent.pythonEnv`).
      '';
    };

    pluginDir = mkOption {
      type = types.nullOr types.package;
      readOnly = true;
      default = if cfg.extraPlugins == [ ] then null else pluginDir;
      defaultText = literalExpression "the folder of extraPlugins, or null";
      description = "The checked folder of `extraPlugins` that `HERMES_PLUGIN_PATH` names.";
    };
  };
}
