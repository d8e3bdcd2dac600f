# Evaluate nix/home-manager.nix with nixpkgs' real module system, as tests/nix/test_home_manager.py
# does:
#   nix-instantiate --eval --strict --json nix/tests/stubs/eval-home.nix \
#     --arg lib 'import /path/to/nixpkgs/lib' \
#     --arg configuration '{ programs.hermes-agent.enable = true; }' -A config.systemd
# Home-Manager's own option declarations are stand-ins (./home-manager.nix), as are the
# packages (./pkgs.nix); `failedAssertions` lists the messages of the assertions that fail.
{
  lib,
  configuration ? { },
  system ? "x86_64-linux",
}:
let
  pkgs = import ./pkgs.nix { inherit lib system; };
  evaluated = lib.evalModules {
    class = "homeManager";
    modules = [
      ./home-manager.nix
      ../../home-manager.nix
      configuration
      {
        home.homeDirectory = "/home/alice";
        _module.args.pkgs = pkgs;
      }
    ];
  };
in
evaluated
// {
  inherit lib pkgs;
  failedAssertions = map (a: a.message) (builtins.filter (a: !a.assertion) evaluated.config.assertions);
}
