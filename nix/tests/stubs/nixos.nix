# The NixOS options nix/module.nix (and the VM test's machine) define, declared as NixOS declares
# them, for evaluating the module with nixpkgs' real lib but without NixOS.
#
# Only declarations: each option has the type NixOS gives it (nixos/modules/config/users-groups.nix,
# system/etc/etc.nix, system/boot/systemd.nix, misc/assertions.nix), so a definition NixOS would
# reject fails here too. Submodules declare just the attributes used here; one the module starts
# using fails as "does not exist" until it is declared below, with NixOS's type.
{
  lib,
  pkgs,
  ...
}:

let
  inherit (lib) mkOption types;

  # What NixOS writes into a unit file: a value per line of `Key=value`, a list giving the key once
  # per element. Several definitions of one key concatenate when any is a list, else must agree.
  unitValue = x: builtins.isBool x || builtins.isInt x || lib.isStringLike x;
  unitOption = lib.mkOptionType {
    name = "systemd option";
    description = "systemd directive value (a word, a number, a path or a list of them)";
    check = x: unitValue x || (builtins.isList x && lib.all unitValue x);
    merge =
      loc: defs:
      if lib.any (d: builtins.isList d.value) defs then
        lib.concatMap (d: lib.toList d.value) defs
      else
        lib.mergeEqualOption loc defs;
  };
  unitName = types.strMatching (
    "[a-zA-Z0-9@%:_.\\-]+[.]"
    + "(service|socket|device|mount|automount|swap|target|path|timer|scope|slice)"
  );
  listOpt =
    elem:
    mkOption {
      type = types.listOf elem;
      default = [ ];
    };
  directives = mkOption {
    type = types.attrsOf unitOption;
    default = { };
  };

  # Options every unit kind has.
  unitOptions = {
    description = mkOption {
      type = types.singleLineStr;
      default = "";
    };
    documentation = listOpt types.str;
    requires = listOpt unitName;
    wants = listOpt unitName;
    after = listOpt unitName;
    wantedBy = listOpt unitName;
    unitConfig = directives;
  };

  service = types.submodule {
    options = unitOptions // {
      serviceConfig = directives;
      environment = mkOption {
        type = types.attrsOf (
          types.nullOr (
            types.oneOf [
              types.str
              types.path
              types.package
            ]
          )
        );
        default = { };
      };
      reloadTriggers = listOpt unitOption;
    };
  };

  socket = types.submodule {
    options = unitOptions // {
      listenStreams = listOpt types.str;
      socketConfig = directives;
    };
  };

  user = types.submodule {
    options = {
      isSystemUser = mkOption {
        type = types.bool;
        default = false;
      };
      isNormalUser = mkOption {
        type = types.bool;
        default = false;
      };
      group = mkOption {
        type = types.str;
        default = "";
      };
      extraGroups = listOpt types.str;
      home = mkOption {
        type = types.passwdEntry types.path;
        default = "/var/empty";
      };
      description = mkOption {
        type = types.passwdEntry types.str;
        default = "";
      };
    };
  };

  group = types.submodule {
    options = {
      gid = mkOption {
        type = types.nullOr types.int;
        default = null;
      };
      members = listOpt (types.passwdEntry types.str);
    };
  };

  etcFile = types.submodule (
    { name, config, ... }:
    {
      options = {
        target = mkOption {
          type = types.str;
          default = name;
        };
        text = mkOption {
          type = types.nullOr types.lines;
          default = null;
        };
        source = mkOption { type = types.path; };
        mode = mkOption {
          type = types.str;
          default = "symlink";
        };
      };
      # As NixOS does: `text` is written to the store and becomes the source.
      config.source = lib.mkIf (config.text != null) (
        lib.mkDefault (pkgs.writeText "etc-${lib.replaceStrings [ "/" ] [ "-" ] name}" config.text)
      );
    }
  );
in
{
  options = {
    # NixOS leaves these untyped and reads `assertion` and `message` from each at build time;
    # typed here so a malformed assertion fails in the tests rather than in nixos-rebuild.
    assertions = listOpt (
      types.submodule {
        options = {
          assertion = mkOption { type = types.bool; };
          message = mkOption { type = types.str; };
        };
      }
    );
    warnings = listOpt types.str;

    users.users = mkOption {
      type = types.attrsOf user;
      default = { };
    };
    users.groups = mkOption {
      type = types.attrsOf group;
      default = { };
    };

    environment.systemPackages = listOpt types.package;
    environment.etc = mkOption {
      type = types.attrsOf etcFile;
      default = { };
    };

    systemd.services = mkOption {
      type = types.attrsOf service;
      default = { };
    };
    systemd.sockets = mkOption {
      type = types.attrsOf socket;
      default = { };
    };
    systemd.tmpfiles.rules = listOpt types.str;
    # nixos/modules/system/boot/systemd/user.nix: the same unit types, for user managers
    systemd.user.services = mkOption {
      type = types.attrsOf service;
      default = { };
    };
    systemd.user.sockets = mkOption {
      type = types.attrsOf socket;
      default = { };
    };
  };
}
