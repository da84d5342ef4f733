#!/bin/sh
# What a command can see from inside tollgate's sandbox (`agent demo` runs it).
# The policy cannot read inside a script; the sandbox is the wall.
echo "== id"
id
echo "== cat /etc/shadow"
cat /etc/shadow
echo "== ls -A /root /home"
ls -A /root /home
echo "== pid 1 here is: $(tr '\0' ' ' < /proc/1/cmdline)"
