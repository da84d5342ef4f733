import json,os,re
HERE=os.path.dirname(os.path.abspath(__file__))
# The one table both backends are built from (supervisor/sandbox/src/seccomp_table.rs):
# ALLOWED passes with any arguments, DENIED is refused (grouped by its reason),
# CONDITIONAL and MODE below get argument checks. A unit test
# (the_docker_profile_is_built_from_the_one_table) fails when this profile and
# that table drift; unknown names to an older libseccomp are skipped by runc.
TABLE=open(os.path.join(HERE,'..','supervisor','sandbox','src','seccomp_table.rs')).read()
def entries(const):
    body=TABLE[TABLE.index('pub(crate) const %s'%const):]
    body=body[:body.index('\n];')]
    return re.findall(r'\(\s*"(\w+)",\s*(\d+),?\s*(?:"([^"]*)",?\s*)?\)',body)
allowed=[n for n,_,_ in entries('ALLOWED')]
deny={}
for n,_,why in entries('DENIED'):
    if n in ('clone3','openat2'): continue  # ENOSYS, below
    deny.setdefault(why,[]).append(n)
# Calls that carry a file mode (supervisor/sandbox/src/setid.rs holds the same
# list, and a unit test holds this profile to it): (name, mode argument, how
# the mode is used). 'always': refused with S_ISUID/S_ISGID in the mode;
# ('creating', F): only when flags argument F has O_CREAT or O_TMPFILE;
# 'node': mknod, also only a regular file, FIFO or socket.
MODE=[('open',2,('creating',1)),('mkdir',1,'always'),('creat',1,'always'),('chmod',1,'always'),
      ('fchmod',1,'always'),('mknod',1,'node'),('openat',3,('creating',2)),('mkdirat',2,'always'),
      ('mknodat',2,'node'),('fchmodat',2,'always'),('fchmodat2',2,'always')]
S_ISUID_ISGID=0o6000
O_CREAT_TMPFILE=0o100|0o20000000
S_IFMT=0o170000
allow=sorted(allowed)
prof={
 "comment":"tollgate docker sandbox seccomp profile: an allowlist (default EPERM) for x86_64 and aarch64 only (i386 and x32 syscalls fail the architecture check); see sandbox-image/README.md",
 "defaultAction":"SCMP_ACT_ERRNO",
 "defaultErrnoRet":1,
 "architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_AARCH64"],
 "syscalls":[]}
S=prof["syscalls"]
S.append({"comment":"ordinary process, file, socket and time syscalls","names":allow,"action":"SCMP_ACT_ALLOW"})
S.append({"comment":"clone without namespace flags (CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET)","names":["clone"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0x7E020000,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}]})
S.append({"comment":"clone3 passes its flags in memory seccomp cannot read: ENOSYS makes libc fall back to clone","names":["clone3"],"action":"SCMP_ACT_ERRNO","errnoRet":38})
for fam,nm in [(1,'AF_UNIX'),(2,'AF_INET'),(10,'AF_INET6')]:
    S.append({"comment":"socket(%s); packet, vsock and the rest are refused"%nm,"names":["socket"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":fam,"op":"SCMP_CMP_EQ"}]})
S.append({"comment":"socket(AF_NETLINK, *, NETLINK_ROUTE) only: in the container's own network namespace it lists lo and, without CAP_NET_ADMIN, changes nothing (glibc's getifaddrs and if_nameindex need it)","names":["socket"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":16,"op":"SCMP_CMP_EQ"},{"index":2,"value":0,"op":"SCMP_CMP_EQ"}]})
S.append({"comment":"socketpair(AF_UNIX)","names":["socketpair"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"}]})
for p in [0,8,0x20000,0x20008,0xffffffff]:
    S.append({"comment":"personality: PER_LINUX, UNAME26, ADDR_NO_RANDOMIZE and the query only","names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":p,"op":"SCMP_CMP_EQ"}]})
# ioctl: allowed unless the low 32 bits of the request are TIOCSTI (0x5412) or TIOCLINUX
# (0x541C). runc + libseccomp 2.5 silently turn a rule with two comparisons on one
# argument into "always true", and an unconditional ALLOW overrides conditional
# ERRNO rules, so the allowed set is spelled out as aligned blocks, one
# single-comparison MASKED_EQ rule each.
EXCL={0x5412,0x541C}
blocks=[]
def cover(prefix,n):
    if not any(prefix<=e<prefix+(1<<n) for e in EXCL): blocks.append((prefix,n)); return
    if n==0: return
    cover(prefix,n-1); cover(prefix+(1<<(n-1)),n-1)
cover(0,32)
for prefix,n in blocks:
    mask=(~((1<<n)-1)) & 0xFFFFFFFFFFFFFFFF
    S.append({"comment":"ioctl requests 0x%x..0x%x"%(prefix,prefix+(1<<n)-1),"names":["ioctl"],"action":"SCMP_ACT_ALLOW","args":[{"index":1,"value":mask,"valueTwo":prefix,"op":"SCMP_CMP_MASKED_EQ"}]})
S.append({"comment":"ioctl requests sign-extended from a negative int (bit 31 set, so never TIOCSTI/TIOCLINUX)","names":["ioctl"],"action":"SCMP_ACT_ALLOW","args":[{"index":1,"value":0xffffffff80000000,"op":"SCMP_CMP_GE"}]})
# Set-user/group-ID bits: a uid-0 session writes the workspace as uid 0 on the
# host, so a setuid-root binary left there is root for any local user. Every
# call that carries a mode is allowed only when the mode has neither bit (one
# MASKED_EQ comparison per rule; rules for one call are alternatives). A name
# this engine's libseccomp does not know (fchmodat2 before 2.5.5) is skipped
# by runc: the call then meets runc's ENOSYS stub (above the highest known
# number in the profile) or the default EPERM, refused either way.
def masked(i,mask,val): return {"index":i,"value":mask,"valueTwo":val,"op":"SCMP_CMP_MASKED_EQ"}
for name,arg,use in MODE:
    if use=='node':
        for t,tn in [(0,'regular (type 0)'),(0o100000,'regular'),(0o010000,'FIFO'),(0o140000,'socket')]:
            S.append({"comment":"%s: a %s node without S_ISUID/S_ISGID (never a device)"%(name,tn),"names":[name],"action":"SCMP_ACT_ALLOW","args":[masked(arg,S_IFMT|S_ISUID_ISGID,t)]})
        continue
    if use!='always':
        S.append({"comment":"%s not creating (no O_CREAT/O_TMPFILE): the mode is unused"%name,"names":[name],"action":"SCMP_ACT_ALLOW","args":[masked(use[1],O_CREAT_TMPFILE,0)]})
    S.append({"comment":"%s with a mode without S_ISUID/S_ISGID"%name,"names":[name],"action":"SCMP_ACT_ALLOW","args":[masked(arg,S_ISUID_ISGID,0)]})
S.append({"comment":"openat2 passes its mode in memory seccomp cannot read: ENOSYS makes callers fall back to openat","names":["openat2"],"action":"SCMP_ACT_ERRNO","errnoRet":38})
for k,v in deny.items():
    S.append({"comment":"refused: "+k,"names":sorted(v),"action":"SCMP_ACT_ERRNO","errnoRet":1})
out=json.dumps(prof,indent=1)
# keep long name lists on few lines
out=re.sub(r'\[\n\s+("[^\]]*?)\n\s*\]', lambda m: '['+' '.join(x.strip() for x in m.group(1).split('\n'))+']', out)
open(os.path.join(os.path.dirname(os.path.abspath(__file__)),'seccomp.json'),'w').write(out+'\n')
print(len(allow),'allowed unconditionally')
