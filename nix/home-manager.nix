# programs.hermes-agent: hermesd for one user, as a Home-Manager module.
#
# The flake's homeManagerModules.default (also homeModules.default), or flake-free
# `imports = [ "${hermesd-checkout}/nix/home-manager.nix" ];`. The options hermesd's settings,
# plugins, Python environment, HTTP door and limits are made of are ./options.nix, the same
# declarations services.hermes-agent (./module.nix) uses, so one `settings` renders the same
# config.yaml under both. The units are the per-user pair of ./units.nix (contrib/systemd/user):
# a socket in $XDG_RUNTIME_DIR/hermes that starts hermesd.service on the first connection,
# HERMES_HOME ~/.hermes. config.yaml is written to $XDG_CONFIG_HOME/hermes and linked into
# HERMES_HOME when hermesd starts; a settings change reloads hermesd (SIGHUP). docs/nixos.md,
# "Home-Manager", is the user's guide.
{
  config,
  lib,
  pkgs,
  ...
}:

let
  inherit (lib) mkIf mkOption types;

  cfg = config.programs.hermes-agent;
  shared = import ./options.nix {
    inherit lib pkgs cfg;
    optionPath = "programs.hermes-agent";
  };
  inherit (shared) python pythonEnv pluginDir configFile foreignPython describeForeign;

  # Where Home-Manager writes the rendered settings; the service links HERMES_HOME's config.yaml
  # to it, so the unit's text does not change with the settings.
  configPath = "${config.xdg.configHome}/hermes/config.yaml";
  # A systemd specifier is expanded in Exec lines: a literal % must be doubled.
  execArg = s: "\"${lib.replaceStrings [ "\\" "\"" "%" ] [ "\\\\" "\\\"" "%%" ] s}\"";

  # Links HERMES_HOME's config.yaml to the rendered one (./link_config.sh).
  linkConfig = pkgs.writeShellScript "hermes-agent-link-config" (
    "export PATH=${pkgs.coreutils}/bin\${PATH:+:$PATH}\n" + builtins.readFile ./link_config.sh
  );

  units = import ./units.nix {
    scope = "user";
    hermesd = "${pythonEnv}/bin/hermesd";
    kill = "${pkgs.coreutils}/bin/kill";
    inherit (cfg) extraArgs memoryHigh memoryMax;
    environment = lib.optionalAttrs (cfg.extraPlugins != [ ]) {
      HERMES_PLUGIN_PATH = "${pluginDir}";
    };
    documentation = [ "file://${cfg.package}/share/doc/hermesd/systemd.md" ];
  };
  service = units.directives.service;
  socket = units.directives.socket;
in
{
  options.programs.hermes-agent = shared.options // {
    enable = lib.mkEnableOption ''
      hermesd, the Hermes-compatible agent daemon, for this user: `hermesd.socket` and
      `hermesd.service` in the user's systemd manager, `hermesctl` on the PATH'';

    startOnLogin = mkOption {
      type = types.bool;
      default = true;
      example = false;
      description = ''
        Start the socket with the user's session (`WantedBy=sockets.target`); hermesd itself
        starts only when a client first connects. Off: `systemctl --user start hermesd.socket`.
      '';
    };
  };

  config = mkIf cfg.enable {
    assertions = [
      {
        assertion = foreignPython == [ ];
        message = ''
          programs.hermes-agent.extraPythonPackages: hermesd runs on ${python.libPrefix or python.name}, but
            ${lib.concatMapStringsSep "\n  " describeForeign foreignPython}
          Build them with hermesd's package set: extraPythonPackages = ps: [ ... ];
        '';
      }
      {
        assertion = lib.all (
          f: !(lib.hasPrefix builtins.storeDir (lib.removePrefix "-" f))
        ) cfg.environmentFiles;
        message =
          "programs.hermes-agent.environmentFiles: a file in the Nix store is world-readable; keep secrets outside it.";
      }
    ];

    programs.hermes-agent.settings = shared.settings;

    # hermesctl looks in $XDG_RUNTIME_DIR/hermes first: the user socket needs no wrapper.
    home.packages = [ cfg.package ];

    xdg.configFile."hermes/config.yaml".source = configFile;

    systemd.user.sockets.hermesd = socket // {
      Install.WantedBy = lib.optionals cfg.startOnLogin socket.Install.WantedBy;
    };

    # The HTTP door's socket (docs/clients.md), as the NixOS module's: hermesd serves the fd
    # named "http". A user manager may bind only unprivileged ports.
    systemd.user.sockets.hermesd-http = mkIf cfg.http.enable {
      Unit.Description = "hermesd HTTP door socket (per user)";
      Socket = {
        ListenStream = cfg.http.listen;
        FileDescriptorName = "http";
        Service = "hermesd.service";
      };
      Install.WantedBy = lib.optionals cfg.startOnLogin [ "sockets.target" ];
    };

    systemd.user.services.hermesd = service // {
      Unit = service.Unit // {
        # Home-Manager's switch reloads (ExecReload=, SIGHUP) a unit whose triggers changed.
        X-Reload-Triggers = [ "${configFile}" ];
      };
      Service =
        service.Service
        // {
          ExecStartPre = "${linkConfig} %h/.hermes ${execArg configPath}";
        }
        // lib.optionalAttrs (cfg.environmentFiles != [ ]) { EnvironmentFile = cfg.environmentFiles; }
        # systemd passes only the sockets a service names
        // lib.optionalAttrs cfg.http.enable { Sockets = [ "hermesd.socket" "hermesd-http.socket" ]; };
    };
  };
}
