# Stand-ins for the Home-Manager option declarations nix/home-manager.nix defines, for evaluating
# it with nixpkgs' real lib but without Home-Manager (which is not available offline).
#
# Only declarations, with the types Home-Manager gives them (modules/systemd.nix: a unit is
# sections of `Key = value` where a value is a word, a number, a path or a list of them;
# modules/home-environment.nix, modules/misc/xdg.nix, modules/files.nix, modules/misc/assertions):
# a definition Home-Manager would reject by type fails here too. An option the module starts
# using fails as "does not exist" until it is declared below.
{
  config,
  lib,
  ...
}:

let
  inherit (lib) mkOption types;
  primitive = types.oneOf [ types.bool types.int types.str types.path ];
  unitType = types.attrsOf (types.attrsOf (types.attrsOf (types.either primitive (types.listOf primitive))));
in
{
  options = {
    assertions = mkOption {
      type = types.listOf types.unspecified;
      default = [ ];
    };
    home.homeDirectory = mkOption { type = types.path; };
    home.packages = mkOption {
      type = types.listOf types.package;
      default = [ ];
    };
    xdg.configHome = mkOption {
      type = types.path;
      default = "${config.home.homeDirectory}/.config";
    };
    xdg.configFile = mkOption {
      type = types.attrsOf (
        types.submodule {
          options.source = mkOption { type = types.path; };
          options.text = mkOption {
            type = types.nullOr types.lines;
            default = null;
          };
        }
      );
      default = { };
    };
    systemd.user.services = mkOption {
      type = unitType;
      default = { };
    };
    systemd.user.sockets = mkOption {
      type = unitType;
      default = { };
    };
  };
}
