{
  description = "hermesd: a Hermes-compatible AI agent daemon";

  # The NixOS module and full packaging arrive with the Nix issue; this flake already builds
  # the package so `nix build` and `nix run` work.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAll = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in {
      packages = forAll (pkgs: rec {
        hermesd = pkgs.callPackage ./nix/package.nix { };
        default = hermesd;
      });
    };
}
