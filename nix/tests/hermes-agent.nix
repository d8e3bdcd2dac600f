# NixOS VM test of services.hermes-agent (needs KVM):
#   nix build .#checks.x86_64-linux.vm -L        or        nix flake check -L
#
# One machine with the module enabled, a directory plugin (extraPlugins) that needs a secret from
# an environmentFiles file, and an entry-point plugin package (extraPythonPackages). alice is in
# the hermes group, bob is not. Checks the socket's owner and mode, hermesctl for alice (status,
# /plugins with both plugins ✓), refusal for bob, that `systemctl reload` keeps the process and
# its sessions, that restart and stop/re-activation keep the socket, and the sandbox's exposure.
{ ... }:

let
  # A directory plugin as a fetcher would deliver it (here built in place, named like a fetch).
  dirPlugin =
    pkgs:
    pkgs.runCommand "source" { } ''
      mkdir -p "$out"
      cat > "$out/plugin.yaml" <<'EOF'
      name: nixdir
      version: 1.0.0
      description: Directory plugin handed in by services.hermes-agent.extraPlugins
      requires_env:
        - NIXDIR_TOKEN
      provides_tools:
        - nixdir_token_length
      EOF
      cat > "$out/__init__.py" <<'EOF'
      import json
      import os

      SCHEMA = {
          "name": "nixdir_token_length",
          "description": "Length of the NIXDIR_TOKEN secret the service was given -> JSON {length}.",
          "parameters": {"type": "object", "properties": {}},
      }


      def token_length(args, **kwargs):
          return json.dumps({"length": len(os.environ.get("NIXDIR_TOKEN", ""))})


      def register(ctx):
          ctx.register_tool(name="nixdir_token_length", toolset="nixdir", schema=SCHEMA,
                            handler=token_length, description=SCHEMA["description"])
      EOF
    '';

  # An entry-point plugin package, built with hermesd's own Python package set.
  entryPlugin =
    pkgs: ps:
    ps.buildPythonPackage {
      pname = "hermes-nixentry";
      version = "1.0.0";
      pyproject = true;
      build-system = [ ps.setuptools ];
      src = pkgs.runCommand "hermes-nixentry-src" { } ''
        mkdir -p "$out/hermes_nixentry"
        cat > "$out/pyproject.toml" <<'EOF'
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "hermes-nixentry"
        version = "1.0.0"
        description = "Entry-point plugin handed in by services.hermes-agent.extraPythonPackages"

        [project.entry-points."hermes_agent.plugins"]
        nixentry = "hermes_nixentry"

        [tool.setuptools]
        packages = ["hermes_nixentry"]
        EOF
        cat > "$out/hermes_nixentry/__init__.py" <<'EOF'
        def register(ctx):
            ctx.register_command("nixentry", handler=lambda raw: "nixentry is here",
                                 description="Say that the entry-point plugin loaded")
        EOF
      '';
    };
in
{
  name = "hermes-agent";

  nodes.machine =
    { config, pkgs, ... }:
    let
      pythonEnv = config.services.hermes-agent.pythonEnv;
      # Sessions through the client library, as a member of the group would script it.
      sessionTool = pkgs.writeScriptBin "hermes-vm-session" ''
        #!${pythonEnv}/bin/python3
        import sys
        from hermesctl.client import Client

        with Client.connect() as c:
            if sys.argv[1] == "create":
                print(c.call("session.create", {"title": "survives reload"})["id"])
            else:
                print("\n".join(s["id"] for s in c.call("session.list", {"limit": 1000})["sessions"]))
      '';
    in
    {
      imports = [ ../module.nix ];

      services.hermes-agent = {
        enable = true;
        extraPlugins = [ (dirPlugin pkgs) ];
        extraPythonPackages = ps: [ (entryPlugin pkgs ps) ];
        environmentFiles = [ "/etc/hermes-test/secrets.env" ];
        settings = {
          model = {
            base_url = "http://127.0.0.1:9/v1";
            default = "test-model";
          };
          approvals.mode = "manual";
        };
        logLevel = "DEBUG";
      };

      # A secret as an operator would place it: outside the store, mode 0600. (This file is in the
      # store because it is a test; real secrets come from sops-nix, agenix or by hand.)
      environment.etc."hermes-test/secrets.env" = {
        text = "NIXDIR_TOKEN=s3cret\n";
        mode = "0600";
      };

      users.users.alice = {
        isNormalUser = true;
        extraGroups = [ config.services.hermes-agent.group ];
      };
      users.users.bob.isNormalUser = true;

      environment.systemPackages = [ sessionTool ];
    };

  testScript =
    { nodes, ... }:
    let
      cfg = nodes.machine.services.hermes-agent;
    in
    ''
      import re

      def as_user(user, command):
          return f"su - {user} -c '{command}'"

      def main_pid():
          return machine.succeed("systemctl show -P MainPID hermesd.service").strip()

      start_all()
      machine.wait_for_unit("hermesd.socket")
      machine.wait_for_unit("hermesd.service")

      with subtest("the socket is hermes:hermes, mode 0660, and hermesd is not root"):
          machine.succeed("test -S ${cfg.socket.path}")
          owner = machine.succeed("stat -c '%U:%G %a' ${cfg.socket.path}").strip()
          assert owner == "hermes:hermes 660", owner
          user = machine.succeed(f"ps -o user= -p {main_pid()}").strip()
          assert user == "hermes", user

      with subtest("config.yaml is the rendered settings, linked into HERMES_HOME"):
          machine.succeed("test -L ${cfg.stateDir}/config.yaml")
          machine.succeed(
              "${cfg.pythonEnv}/bin/python3 -c 'import yaml; "
              "c = yaml.safe_load(open(\"${cfg.stateDir}/config.yaml\")); "
              "assert c[\"model\"][\"base_url\"] == \"http://127.0.0.1:9/v1\", c; "
              "assert c[\"socket\"][\"group\"] == \"hermes\", c'"
          )
          machine.succeed(
              "runuser -u hermes -- env HERMES_HOME=${cfg.stateDir} ${cfg.pythonEnv}/bin/hermesd --check-config"
          )

      with subtest("a member of the group uses hermesctl"):
          status = machine.succeed(as_user("alice", "hermesctl status"))
          assert "socket-activated" in status, status
          plugins = machine.succeed(as_user("alice", "hermesctl cmd /plugins"))
          assert "✓ nixdir v1.0.0" in plugins, plugins
          assert "✓ nixentry v1.0.0" in plugins, plugins

      with subtest("environmentFiles reach the daemon, and not the unit file"):
          out = machine.succeed(as_user("alice", "hermesctl tools call nixdir_token_length"))
          assert re.search(r'"length":\s*6', out), out
          machine.fail("grep -r s3cret /etc/systemd/system/hermesd.service")

      with subtest("a user outside the group is refused"):
          machine.fail(as_user("bob", "hermesctl status"))

      with subtest("systemctl reload keeps the process and its sessions"):
          session = machine.succeed(as_user("alice", "hermes-vm-session create")).strip()
          before = main_pid()
          machine.succeed("systemctl reload hermesd.service")
          machine.wait_until_succeeds("systemctl show -P ActiveState hermesd.service | grep -qx active")
          assert main_pid() == before, "reload restarted hermesd"
          assert session in machine.succeed(as_user("alice", "hermes-vm-session list")).split()
          machine.succeed(as_user("alice", "hermesctl status"))

      with subtest("systemctl restart: the socket stays, hermesd and its sessions come back"):
          before = main_pid()
          machine.succeed("systemctl restart hermesd.service")
          machine.wait_for_unit("hermesd.service")
          assert main_pid() != before, "restart kept the old process"
          machine.succeed("test -S ${cfg.socket.path}")
          assert session in machine.succeed(as_user("alice", "hermes-vm-session list")).split()

      with subtest("after a stop the socket remains and the next connection starts hermesd"):
          machine.succeed("systemctl stop hermesd.service")
          machine.succeed("test -S ${cfg.socket.path}")
          # The first connection waits while systemd starts hermesd.
          machine.wait_until_succeeds(as_user("alice", "hermesctl status"))
          machine.wait_for_unit("hermesd.service")

      with subtest("the sandbox rates at most 2.0"):
          out = machine.succeed("systemd-analyze security --no-pager hermesd.service")
          score = float(re.search(r"Overall exposure level for hermesd.service: ([0-9.]+)", out).group(1))
          assert score <= 2.0, out
    '';
}
