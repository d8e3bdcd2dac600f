{
  description = "hermesd: a Hermes-compatible AI agent daemon, with a NixOS module (services.hermes-agent)";

  # The only input. flake.lock pins it: `nix flake lock` creates the lock, `nix flake update`
  # moves it forward (docs/nixos.md).
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs =
    { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f system nixpkgs.legacyPackages.${system});
    in
    {
      # pkgs.hermesd, built with the importing nixpkgs' Python.
      overlays.default = final: prev: { hermesd = final.callPackage ./nix/package.nix { }; };

      packages = forAllSystems (
        system: pkgs: {
          hermesd = pkgs.callPackage ./nix/package.nix { };
          default = self.packages.${system}.hermesd;
        }
      );

      apps = forAllSystems (
        system: pkgs:
        let
          hermesd = self.packages.${system}.hermesd;
        in
        {
          hermesd = {
            type = "app";
            program = "${hermesd}/bin/hermesd";
            meta.description = "Run the hermesd agent daemon in the foreground";
          };
          hermesctl = {
            type = "app";
            program = "${hermesd}/bin/hermesctl";
            meta.description = "Talk to a running hermesd";
          };
          default = self.apps.${system}.hermesd;
        }
      );

      # The module builds hermesd from the system's own nixpkgs, so extraPythonPackages taken
      # from that nixpkgs match its Python.
      nixosModules.hermes-agent = import ./nix/module.nix;
      nixosModules.default = self.nixosModules.hermes-agent;

      # programs.hermes-agent: hermesd for one user (systemd user units), with the NixOS
      # module's settings and plugin options. homeModules is the newer name for the same output.
      homeManagerModules.hermes-agent = import ./nix/home-manager.nix;
      homeManagerModules.default = self.homeManagerModules.hermes-agent;
      homeModules = self.homeManagerModules;

      checks = forAllSystems (
        system: pkgs: {
          # The package runs the test suite in its checkPhase.
          hermesd = self.packages.${system}.hermesd;
          # Boots a VM with the module: needs KVM (`nix flake check`, or `nix build .#checks.x86_64-linux.vm`).
          vm = pkgs.testers.runNixOSTest (import ./nix/tests/hermes-agent.nix);
        }
      );

      devShells = forAllSystems (
        system: pkgs: {
          default = pkgs.mkShell {
            packages = [
              self.packages.${system}.hermesd.devPython
              pkgs.systemd # systemd-analyze, systemd-socket-activate for the tests
              pkgs.ruff
            ];
            # Work on the checkout itself: `python -m hermesd`, `python -m pytest`.
            shellHook = ''
              export PYTHONPATH="$PWD''${PYTHONPATH:+:$PYTHONPATH}"
            '';
          };
        }
      );
    };
}
