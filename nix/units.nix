# The hermesd systemd units, declared once.
#
# A pure function (builtins only, no nixpkgs) from a few parameters to the directives of
# hermesd.socket and hermesd.service, in the order they are written out. Its defaults are the
# paths of a conventional Linux install: `nix/render_units.py` writes contrib/systemd/* from
# `import ./units.nix { }`, and nix/module.nix calls it with store paths and the module's
# options. So the shipped units and the NixOS units cannot drift apart; tests/nix/test_units.py
# checks both.
#
# `scope = "user"` gives the per-user pair instead (contrib/systemd/user/*, the module's
# systemd.user units): no user or group of its own, HERMES_HOME ~/.hermes, the socket in
# $XDG_RUNTIME_DIR/hermes (%t), and the part of the sandbox an unprivileged manager can apply.
#
# Result: { socket, service } each { header, sections = [ { name, entries } ] }, where an entry
# is { key, value } (value a string, or a list of words joined by spaces) or { comment };
# `directives` gives every section as an attribute set (repeated keys become lists), and
# `environment` the Environment= variables as an attribute set.
{
  scope ? "system", # or "user": the per-user units
  # the program ExecStart= runs: a bare name is looked up by systemd in /usr/local/sbin,
  # /usr/local/bin, /usr/sbin, /usr/bin, /sbin and /bin, so a distribution's /usr/bin/hermesd
  # and `pip install` as root (/usr/local/bin/hermesd) both work
  hermesd ? "hermesd",
  kill ? "/bin/kill", # ExecReload= sends SIGHUP with it
  user ? "hermes",
  group ? "hermes",
  stateDir ? "/var/lib/hermes", # HERMES_HOME
  socketPath ? "/run/hermes/hermesd.sock",
  socketMode ? "0660",
  environment ? { }, # more Environment= variables, after HERMES_HOME
  environmentFiles ? [ "-/etc/hermes/env" ], # "-" prefix: optional file
  execStartPre ? [ ], # argv lists, run before ExecStart=
  extraArgs ? [ ], # appended to ExecStart=
  # cgroup memory limits (docs/systemd.md, "Memory"): above MemoryHigh= the kernel reclaims
  # hard and slows hermesd down; at MemoryMax= it kills it (and the unit restarts). null: none
  memoryHigh ? "1536M",
  memoryMax ? "2G",
  # docs/systemd.md, where the documented install puts it (docs/systemd.md, "Installing")
  documentation ? [ "file:///usr/share/doc/hermesd/systemd.md" ],
}:

let
  inherit (builtins)
    concatStringsSep filter listToAttrs map match replaceStrings stringLength substring;

  d = key: value: { inherit key value; };
  note = comment: { inherit comment; };

  hasPrefix = prefix: s: substring 0 (stringLength prefix) s == prefix;

  # systemd splits Exec lines itself: quote what is not a plain word, escape specifiers (%)
  # and variable references ($) so every argument reaches hermesd as written.
  escapeExecArg =
    arg:
    let
      escaped = replaceStrings [ "\\" "\"" "%" "$" ] [ "\\\\" "\\\"" "%%" "$$" ] arg;
    in
    if match "[A-Za-z0-9_@+=:,./-]+" arg != null then escaped else "\"${escaped}\"";
  execLine = argv: concatStringsSep " " (map escapeExecArg argv);

  # StateDirectory= only names directories below /var/lib; elsewhere the module creates the
  # directory and the sandbox is opened for it with ReadWritePaths=.
  stateDirectory =
    if hasPrefix "/var/lib/" stateDir then substring 9 (stringLength stateDir) stateDir else null;

  docs = if documentation == [ ] then [ ] else [ (d "Documentation" documentation) ];

  memory =
    [ (note "A runaway plugin or a huge answer: slowed at MemoryHigh=, stopped at MemoryMax=.") ]
    ++ (if memoryHigh == null then [ ] else [ (d "MemoryHigh" memoryHigh) ])
    ++ (if memoryMax == null then [ ] else [ (d "MemoryMax" memoryMax) ]);

  env = [ { name = "HERMES_HOME"; value = stateDir; } ]
    ++ map (name: { inherit name; value = environment.${name}; }) (builtins.attrNames environment);

  socket = {
    header = [
      "hermesd socket: systemd owns the socket and starts hermesd.service on the first connection."
      "Members of the \"${group}\" group may connect; hermesd checks SO_PEERCRED on every connection."
    ];
    sections = [
      {
        name = "Unit";
        entries = [
          (d "Description" "hermesd agent daemon socket")
        ]
        ++ docs;
      }
      {
        name = "Socket";
        entries = [
          (d "ListenStream" socketPath)
          (d "SocketUser" user)
          (d "SocketGroup" group)
          (d "SocketMode" socketMode)
          (note "Created by systemd (as root) before hermesd ever runs; the socket's own mode and group")
          (note "are the gate, so the directory must let group members through from the start.")
          (d "DirectoryMode" "0755")
          (d "RemoveOnStop" "yes")
          (d "Accept" "no")
        ];
      }
      {
        name = "Install";
        entries = [ (d "WantedBy" [ "sockets.target" ]) ];
      }
    ];
  };

  service = {
    header = [
      "hermesd as a system service: an unprivileged user, socket-activated, Type=notify with a"
      "watchdog, journald logging, and a sandbox that leaves it only its state directory and the"
      "network (for the model endpoint). Secrets go in an EnvironmentFile= (mode 0600), never here."
    ];
    sections = [
      {
        name = "Unit";
        entries = [
          (d "Description" "hermesd Hermes-compatible agent daemon")
        ]
        ++ docs
        ++ [
          (d "Requires" [ "hermesd.socket" ])
          (d "After" [ "hermesd.socket" "network-online.target" ])
          (d "Wants" [ "network-online.target" ])
        ];
      }
      {
        name = "Service";
        entries = [
          (d "Type" "notify")
          (d "NotifyAccess" "main")
        ]
        ++ map (argv: d "ExecStartPre" (execLine argv)) execStartPre
        ++ [
          (d "ExecStart" (execLine ([ hermesd ] ++ extraArgs)))
          (d "ExecReload" "${kill} -HUP $MAINPID")
          (d "Restart" "on-failure")
          (d "RestartSec" "2")
          (note "65 state.db damaged, 69 socket busy, 77 refused to run as root, 78 bad configuration: restarting will not help.")
          (d "RestartPreventExitStatus" "65 69 77 78")
          (d "WatchdogSec" "30")
          (d "TimeoutStopSec" "30")
        ]
        ++ memory
        ++ [
          (d "User" user)
          (d "Group" group)
        ]
        ++ map (e: d "Environment" "${e.name}=${e.value}") env
        ++ map (f: d "EnvironmentFile" f) environmentFiles
        ++ (
          if stateDirectory != null then
            [
              (d "StateDirectory" stateDirectory)
              (d "StateDirectoryMode" "0700")
            ]
          else
            [ (d "ReadWritePaths" stateDir) ]
        )
        ++ [
          (note "The socket unit owns the socket inside; keep the directory when hermesd stops.")
          (d "RuntimeDirectory" "hermes")
          (d "RuntimeDirectoryMode" "0755")
          (d "RuntimeDirectoryPreserve" "yes")
          (d "WorkingDirectory" stateDir)
          (d "UMask" "0077")
          (note "")
          (note "Sandbox")
          (d "NoNewPrivileges" "yes")
          (d "CapabilityBoundingSet" "")
          (d "AmbientCapabilities" "")
          (d "ProtectSystem" "strict")
          (d "ProtectHome" "yes")
          (d "PrivateTmp" "yes")
          (d "PrivateDevices" "yes")
          (d "DevicePolicy" "closed")
          (d "ProtectKernelTunables" "yes")
          (d "ProtectKernelModules" "yes")
          (d "ProtectKernelLogs" "yes")
          (d "ProtectControlGroups" "yes")
          (d "ProtectClock" "yes")
          (d "ProtectHostname" "yes")
          (d "ProtectProc" "invisible")
          (d "ProcSubset" "pid")
          (d "RestrictAddressFamilies" "AF_UNIX AF_INET AF_INET6")
          (d "RestrictNamespaces" "yes")
          (d "RestrictRealtime" "yes")
          (d "RestrictSUIDSGID" "yes")
          (d "LockPersonality" "yes")
          (d "MemoryDenyWriteExecute" "yes")
          (d "RemoveIPC" "yes")
          (d "PrivateMounts" "yes")
          (d "KeyringMode" "private")
          (d "SystemCallArchitectures" "native")
          (d "SystemCallFilter" "@system-service")
          (d "SystemCallFilter" "~@privileged @resources")
          (note "hermesd confines every tool command with Landlock here (docs/sandbox.md); systemd 252")
          (note "names its system calls in no group. User namespaces stay closed: bubblewrap would")
          (note "need RestrictNamespaces=user mnt pid, @mount and a full /proc (exposure 2.1, not 1.2).")
          (d "SystemCallFilter" "landlock_create_ruleset landlock_add_rule landlock_restrict_self")
          (note "Each tool call lowers its own rlimits (sandbox.limits, docs/sandbox.md): the two calls")
          (note "that do it come back from @resources (exposure 1.4).")
          (d "SystemCallFilter" "setrlimit prlimit64")
          (d "SystemCallErrorNumber" "EPERM")
          (note "PrivateUsers= would map every client uid to \"nobody\" in SO_PEERCRED, breaking the group check.")
          (d "PrivateUsers" "no")
        ];
      }
      {
        name = "Install";
        entries = [ (d "WantedBy" [ "multi-user.target" ]) ];
      }
    ];
  };

  # --- the per-user pair ---------------------------------------------------------------------

  userEnv = [ { name = "HERMES_HOME"; value = "%h/.hermes"; } ]
    ++ map (name: { inherit name; value = environment.${name}; }) (builtins.attrNames environment);

  userSocket = {
    header = [
      "hermesd socket for one user (systemctl --user): systemd owns the socket in"
      "$XDG_RUNTIME_DIR/hermes and starts hermesd.service on the first connection. Only this"
      "user may connect (mode 0600); hermesd checks SO_PEERCRED on every connection too."
    ];
    sections = [
      {
        name = "Unit";
        entries = [ (d "Description" "hermesd agent daemon socket (per user)") ] ++ docs;
      }
      {
        name = "Socket";
        entries = [
          (d "ListenStream" "%t/hermes/hermesd.sock")
          (d "SocketMode" "0600")
          (d "DirectoryMode" "0700")
          (d "RemoveOnStop" "yes")
          (d "Accept" "no")
        ];
      }
      {
        name = "Install";
        entries = [ (d "WantedBy" [ "sockets.target" ]) ];
      }
    ];
  };

  userService = {
    header = [
      "hermesd for one user (systemctl --user): socket-activated, Type=notify with a watchdog,"
      "HERMES_HOME ~/.hermes (config.yaml, .env with the API key, sessions), journald logging."
      "A user manager cannot build the system unit's mount sandbox; the system-call and"
      "address-family filters below need no privileges and stay."
    ];
    sections = [
      {
        name = "Unit";
        entries = [
          (d "Description" "hermesd Hermes-compatible agent daemon (per user)")
        ]
        ++ docs
        ++ [
          (d "Requires" [ "hermesd.socket" ])
          (d "After" [ "hermesd.socket" ])
        ];
      }
      {
        name = "Service";
        entries = [
          (d "Type" "notify")
          (d "NotifyAccess" "main")
          (d "ExecStart" (execLine ([ hermesd ] ++ extraArgs)))
          (d "ExecReload" "${kill} -HUP $MAINPID")
          (d "Restart" "on-failure")
          (d "RestartSec" "2")
          (note "65 state.db damaged, 69 socket busy, 77 refused to run as root, 78 bad configuration: restarting will not help.")
          (d "RestartPreventExitStatus" "65 69 77 78")
          (d "WatchdogSec" "30")
          (d "TimeoutStopSec" "30")
        ]
        ++ memory
        ++ map (e: d "Environment" "${e.name}=${e.value}") userEnv
        ++ [
          (d "UMask" "0077")
          (note "")
          (note "Sandbox (what an unprivileged manager can apply)")
          (d "NoNewPrivileges" "yes")
          (d "RestrictAddressFamilies" "AF_UNIX AF_INET AF_INET6")
          (d "RestrictRealtime" "yes")
          (d "RestrictSUIDSGID" "yes")
          (d "LockPersonality" "yes")
          (d "MemoryDenyWriteExecute" "yes")
          (d "SystemCallArchitectures" "native")
          (d "SystemCallFilter" "@system-service")
          (d "SystemCallFilter" "~@privileged @resources")
          (note "Each tool call lowers its own rlimits (sandbox.limits, docs/sandbox.md).")
          (d "SystemCallFilter" "setrlimit prlimit64")
          (d "SystemCallErrorNumber" "EPERM")
        ];
      }
      {
        name = "Install";
        entries = [ (d "WantedBy" [ "default.target" ]) ];
      }
    ];
  };

  chosen =
    if scope == "user" then
      { socket = userSocket; service = userService; env = userEnv; }
    else if scope == "system" then
      { inherit socket service env; }
    else
      throw "units.nix: scope must be \"system\" or \"user\", not ${scope}";

  # { Section = { Key = value; }; }, a key written more than once giving the list of its values.
  directivesOf =
    unit:
    listToAttrs (
      map (
        section:
        let
          directives = filter (e: e ? key) section.entries;
          valuesOf = key: map (e: e.value) (filter (e: e.key == key) directives);
        in
        {
          inherit (section) name;
          value = listToAttrs (
            map (
              e:
              let
                values = valuesOf e.key;
              in
              {
                name = e.key;
                value = if builtins.length values == 1 then builtins.head values else values;
              }
            ) directives
          );
        }
      ) unit.sections
    );
in
{
  inherit (chosen) socket service;
  inherit stateDirectory escapeExecArg execLine;
  directives = {
    socket = directivesOf chosen.socket;
    service = directivesOf chosen.service;
  };
  environment = listToAttrs chosen.env;
}
