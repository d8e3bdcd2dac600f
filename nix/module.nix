# services.hermes-agent: hermesd as a socket-activated, sandboxed NixOS service.
#
# Flake-free: `imports = [ "${hermesd-checkout}/nix/module.nix" ];` works as well as the flake's
# nixosModules.default. The unit directives come from ./units.nix, the same declaration
# contrib/systemd/* are generated from. Plugins arrive two ways, both checked at build time:
# directory plugins (extraPlugins) linked into one folder named by HERMES_PLUGIN_PATH, and Python
# packages with `hermes_agent.plugins` entry points (extraPythonPackages) installed into the one
# Python environment hermesd runs from. docs/nixos.md is the user's guide.
{
  config,
  lib,
  pkgs,
  ...
}:

let
  inherit (lib)
    mkEnableOption
    mkIf
    mkOption
    literalExpression
    types
    ;

  cfg = config.services.hermes-agent;
  settingsFormat = pkgs.formats.yaml { };
  defaultSocket = "/run/hermes/hermesd.sock";
  # The stable path the service links $HERMES_HOME/config.yaml to: a settings change replaces the
  # file behind it and reloads hermesd (SIGHUP) instead of restarting it.
  configLink = "/etc/hermes/config.yaml";

  absolutePath = types.strMatching "/.+";

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
        ${pythonEnv}/bin/python3 ${./check_config.py} "$out"
      '';

  # --- hermesctl on PATH -------------------------------------------------------------------------------

  hermesctl =
    pkgs.runCommand "hermesctl-${cfg.package.version or "0"}"
      { nativeBuildInputs = lib.optional (cfg.socket.path != defaultSocket) pkgs.makeWrapper; }
      (
        if cfg.socket.path == defaultSocket then
          # hermesctl falls back to the system socket on its own.
          ''
            mkdir -p "$out/bin"
            ln -s ${cfg.package}/bin/hermesctl "$out/bin/hermesctl"
          ''
        else
          ''
            mkdir -p "$out/bin"
            makeWrapper ${cfg.package}/bin/hermesctl "$out/bin/hermesctl" \
              --set-default HERMES_SOCKET ${lib.escapeShellArg cfg.socket.path}
          ''
      );

  # --- units -----------------------------------------------------------------------------------------

  units = import ./units.nix {
    hermesd = "${pythonEnv}/bin/hermesd";
    kill = "${pkgs.coreutils}/bin/kill";
    inherit (cfg) user group stateDir extraArgs environmentFiles memoryHigh memoryMax;
    socketPath = cfg.socket.path;
    socketMode = cfg.socket.mode;
    environment = lib.optionalAttrs (cfg.extraPlugins != [ ]) {
      HERMES_PLUGIN_PATH = "${pluginDir}";
    };
    execStartPre = [
      [ "${pkgs.coreutils}/bin/ln" "-sfn" configLink "${cfg.stateDir}/config.yaml" ]
    ];
    documentation = [ docLink ];
  };
  service = units.directives.service;
  socket = units.directives.socket;
  words = key: section: section.${key} or [ ];
  unitKeys = [ "Description" "Documentation" "Requires" "After" "Wants" ];

  # docs/systemd.md as the package installs it (package.nix: $out/share/doc/hermesd)
  docLink = "file://${cfg.package}/share/doc/hermesd/systemd.md";

  # The per-user pair (systemd.user units): every user who starts it gets a hermesd of their own.
  userUnits = import ./units.nix {
    scope = "user";
    hermesd = "${pythonEnv}/bin/hermesd";
    kill = "${pkgs.coreutils}/bin/kill";
    inherit (cfg) extraArgs memoryHigh memoryMax;
    environment = lib.optionalAttrs (cfg.extraPlugins != [ ]) {
      HERMES_PLUGIN_PATH = "${pluginDir}";
    };
    documentation = [ docLink ];
  };
  userService = userUnits.directives.service;
  userSocket = userUnits.directives.socket;
in
{
  options.services.hermes-agent = {
    enable = mkEnableOption "hermesd, the Hermes-compatible agent daemon, as a system service";

    userService = {
      enable = mkOption {
        type = types.bool;
        default = false;
        example = true;
        description = ''
          Also (or instead) offer hermesd as a per-user service: systemd.user units
          `hermesd.socket` and `hermesd.service`, so that each user who runs
          `systemctl --user enable --now hermesd.socket` gets a hermesd of their own, with
          `HERMES_HOME` ~/.hermes (their own config.yaml and .env) and the socket in
          $XDG_RUNTIME_DIR/hermes, where hermesctl looks first. It runs the same Python
          environment (`extraPythonPackages`, `extraPlugins`, `extraArgs`); `settings`,
          `environmentFiles`, `user`, `group`, `stateDir` and `socket` are the system
          service's.
        '';
      };
      startByDefault = mkOption {
        type = types.bool;
        default = false;
        example = true;
        description = ''
          Enable the per-user socket for every user (`wantedBy = [ "sockets.target" ]`),
          instead of each user enabling it with `systemctl --user enable --now hermesd.socket`.
          hermesd itself starts only when a client first connects.
        '';
      };
    };

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

    user = mkOption {
      type = types.str;
      default = "hermes";
      example = "hermes-agent";
      description = ''
        User hermesd runs as. Created as a system user when left at `hermes`; any other name
        must exist already. Never `root`: hermesd refuses to run as root.
      '';
    };

    group = mkOption {
      type = types.str;
      default = "hermes";
      example = "agents";
      description = ''
        Group of the service and of its socket. Members may connect with `hermesctl`; hermesd
        checks each peer's credentials and admits its own user, root and this group's members.
        Created when left at `hermes`.
      '';
    };

    stateDir = mkOption {
      type = absolutePath;
      default = "/var/lib/hermes";
      example = "/srv/hermes";
      description = ''
        hermesd's home (`HERMES_HOME`): sessions (`state.db`), user skills and plugins, and a
        `config.yaml` link to the rendered `settings`. Mode 0700, owned by `user`. Below
        /var/lib it is the unit's `StateDirectory=`; elsewhere it is created by tmpfiles.
      '';
    };

    socket = {
      path = mkOption {
        type = absolutePath;
        default = defaultSocket;
        example = "/run/hermes-agent/hermesd.sock";
        description = ''
          Unix socket systemd listens on (`ListenStream=` of hermesd.socket) and hands to
          hermesd. hermesctl finds the default path by itself; for another path the hermesctl
          on the system PATH is wrapped with it as the default `HERMES_SOCKET`.
        '';
      };
      mode = mkOption {
        type = types.strMatching "0?[0-7]{3}";
        default = "0660";
        example = "0600";
        description = ''
          File mode of the socket (`SocketMode=`). The default lets members of `group`
          connect; `0600` keeps hermesd to its own user and root.
        '';
      };
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
        Checked against hermesd's schema at build time. The module sets `socket.path`,
        `socket.mode`, `socket.group` and `log_level` from its own options. It ends up in the
        world-readable Nix store: put API keys in `environmentFiles`, never here.
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
        the journal: `journalctl -u hermesd`.
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
        `''${config.services.hermes-agent.pythonEnv}/bin/hermesd --check-config`.
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

  config = lib.mkMerge [
  (mkIf cfg.userService.enable {
    environment.systemPackages = [ hermesctl ];

    systemd.user.sockets.hermesd = {
      description = userSocket.Unit.Description;
      documentation = words "Documentation" userSocket.Unit;
      wantedBy = lib.optionals cfg.userService.startByDefault userSocket.Install.WantedBy;
      listenStreams = [ userSocket.Socket.ListenStream ];
      socketConfig = removeAttrs userSocket.Socket [ "ListenStream" ];
      unitConfig = removeAttrs userSocket.Unit unitKeys;
    };

    systemd.user.services.hermesd = {
      description = userService.Unit.Description;
      documentation = words "Documentation" userService.Unit;
      requires = words "Requires" userService.Unit;
      after = words "After" userService.Unit;
      unitConfig = removeAttrs userService.Unit unitKeys;
      environment = userUnits.environment;
      serviceConfig = removeAttrs userService.Service [ "Environment" ];
    };
  })
  (mkIf cfg.enable {
    assertions = [
      {
        assertion = cfg.user != "root";
        message =
          "services.hermes-agent.user must not be root: hermesd refuses to run as root (exit status 77).";
      }
      {
        assertion = foreignPython == [ ];
        message = ''
          services.hermes-agent.extraPythonPackages: hermesd runs on ${python.libPrefix or python.name}, but
            ${lib.concatMapStringsSep "\n  " describeForeign foreignPython}
          Build them with hermesd's package set:
            extraPythonPackages = ps: [ (ps.buildPythonPackage { ... }) ];
          or build hermesd for their Python:
            services.hermes-agent.package = pkgs.callPackage <hermesd>/nix/package.nix {
              python3Packages = pkgs.python312Packages;
            };
        '';
      }
      {
        assertion = lib.all (
          f: !(lib.hasPrefix builtins.storeDir (lib.removePrefix "-" f))
        ) cfg.environmentFiles;
        message =
          "services.hermes-agent.environmentFiles: a file in the Nix store is world-readable; keep secrets outside it.";
      }
    ];

    services.hermes-agent.settings = {
      socket = {
        inherit (cfg.socket) path mode;
        inherit (cfg) group;
      };
      log_level = cfg.logLevel;
      http = mkIf cfg.http.enable (
        { inherit (cfg.http) listen; }
        // lib.optionalAttrs (cfg.http.tokenFile != null) { token_file = cfg.http.tokenFile; }
      );
      mcp_servers = mkIf (cfg.mcpServers != { }) (
        lib.mapAttrs (_: server: lib.filterAttrs (_: v: v != null) (server // {
          command =
            if server.command == null then null
            else if lib.isDerivation server.command then lib.getExe server.command
            else "${server.command}";
        })) cfg.mcpServers
      );
    };

    users.users = mkIf (cfg.user == "hermes") {
      hermes = {
        isSystemUser = true;
        inherit (cfg) group;
        home = cfg.stateDir;
        description = "hermesd agent daemon";
      };
    };
    users.groups = mkIf (cfg.group == "hermes") { hermes = { }; };

    environment.systemPackages = [ hermesctl ];
    environment.etc."hermes/config.yaml".source = configFile;

    systemd.tmpfiles.rules = lib.optional (
      units.stateDirectory == null
    ) "d ${cfg.stateDir} 0700 ${cfg.user} ${cfg.group} - -";

    systemd.sockets.hermesd = {
      description = socket.Unit.Description;
      documentation = words "Documentation" socket.Unit;
      wantedBy = socket.Install.WantedBy;
      listenStreams = [ socket.Socket.ListenStream ];
      socketConfig = removeAttrs socket.Socket [ "ListenStream" ];
      unitConfig = removeAttrs socket.Unit unitKeys;
    };

    systemd.services.hermesd = {
      description = service.Unit.Description;
      documentation = words "Documentation" service.Unit;
      requires = words "Requires" service.Unit;
      after = words "After" service.Unit;
      wants = words "Wants" service.Unit;
      wantedBy = service.Install.WantedBy;
      unitConfig = removeAttrs service.Unit unitKeys;
      environment = units.environment;
      serviceConfig = removeAttrs service.Service [ "Environment" ]
        # the HTTP door's socket too: systemd passes only sockets the service names
        // lib.optionalAttrs cfg.http.enable { Sockets = [ "hermesd.socket" "hermesd-http.socket" ]; };
      reloadTriggers = [ configFile ];
    };

    # The HTTP door's socket (docs/clients.md): a connection starts hermesd like one on the
    # RPC socket; hermesd serves the fd named "http". No firewall port is opened.
    systemd.sockets.hermesd-http = mkIf cfg.http.enable {
      description = "hermesd HTTP door socket";
      wantedBy = [ "sockets.target" ];
      listenStreams = [ cfg.http.listen ];
      socketConfig = {
        FileDescriptorName = "http";
        Service = "hermesd.service";
      };
    };
  })
  ];
}
