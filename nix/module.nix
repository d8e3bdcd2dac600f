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
  defaultSocket = "/run/hermes/hermesd.sock";
  # The stable path the service links $HERMES_HOME/config.yaml to: a settings change replaces the
  # file behind it and reloads hermesd (SIGHUP) instead of restarting it.
  configLink = "/etc/hermes/config.yaml";

  absolutePath = types.strMatching "/.+";

  shared = import ./options.nix {
    inherit lib pkgs cfg;
    optionPath = "services.hermes-agent";
  };
  inherit (shared)
    python
    pythonEnv
    pluginDir
    configFile
    foreignPython
    describeForeign
    ;

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
  options.services.hermes-agent = shared.options // {
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

    services.hermes-agent.settings = lib.mkMerge [
      shared.settings
      {
        socket = {
          inherit (cfg.socket) path mode;
          inherit (cfg) group;
        };
      }
    ];

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
