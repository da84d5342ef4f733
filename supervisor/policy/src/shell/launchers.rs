//! Programs that run another program, and how to find the command each one
//! runs: its options (with the values they take), the words between them and
//! the command (timeout's duration, flock's lock file), and how the command
//! is given (as words, as a `sh -c` string, once per input item).
//!
//! One table, read by [`parse`]. The shell policy judges the command found
//! as if it were run directly. When the words before the command are only
//! known at run time (an unquoted `$X` may become several words or none),
//! or an option is one the table does not know (it might take a value and
//! shift the command), the command cannot be found and is never allowed.

use std::sync::LazyLock;

use super::lists::NameMap;
use super::options::{self, Arity, Long, Opt, Role, Table};
use super::words::Word;

/// How the command words are given to the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Feed {
    /// The words are the command and its arguments.
    Argv,
    /// The words are joined with spaces and run by `sh -c` (watch, ssh).
    ShellWords,
    /// The words are arguments of a shell (`su user -c …`).
    ShellArgs,
    /// Each word is a shell script (moreutils `pee`).
    EachScript,
    /// xargs: the command gets input items appended, or in place of `-I`'s
    /// string.
    Items,
    /// GNU parallel: a command line with `{}` placeholders, items after
    /// `:::` or from the input.
    Parallel,
    /// The words are not a command; one comes only from an option or
    /// stdin (`script -c`, `at`).
    Nothing,
}

/// What runs when no command is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bare {
    Nothing,
    /// A shell that reads its program from stdin (`chroot DIR`, `su`).
    Shell,
}

/// A word before the command that is not an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operand {
    /// Always there (timeout's duration).
    Any,
    /// A file the program creates or writes (flock's lock file).
    Writes,
    /// There when it is a number (chrt's priority; newer chrt lets it out).
    Number,
    /// There when it is the first word and not an option (setarch's arch).
    First,
    /// Maybe there: both readings are judged (runcon's context).
    Maybe,
}

/// One program that runs another.
#[derive(Debug)]
pub(super) struct Launcher {
    pub names: &'static [&'static str],
    /// When not empty, only these subcommands run a command (`npm exec`,
    /// `uv run`); the options follow the subcommand.
    pub sub: &'static [&'static str],
    pub opts: &'static str,
    pub operands: &'static [Operand],
    /// Options may follow the operands (GNU argument permutation).
    pub permute: bool,
    pub feed: Feed,
    pub bare: Bare,
    /// `-19`, `--10`: a number is an option (nice).
    pub numeric: bool,
    /// Every long option is one word (`--x` or `--x=v`), known or not
    /// (valgrind, firejail).
    pub glued_long: bool,
    /// A lone `-` is an option (env's `-i`, su's `-l`).
    pub dash: bool,
    /// `NAME=VALUE` words after the options set variables (env).
    pub assignments: bool,
    /// `-name` is a long option when the table has one so named (gdb).
    pub single_dash_long: bool,
}

const PREFIX: Launcher = Launcher {
    names: &[],
    sub: &[],
    opts: "",
    operands: &[],
    permute: false,
    feed: Feed::Argv,
    bare: Bare::Nothing,
    numeric: false,
    glued_long: false,
    dash: false,
    assignments: false,
    single_dash_long: false,
};

const HELP: &str = "help@inert version@inert";

/// The table. Options common to GNU tools (`--help`, `--version`) are
/// listed per program, since some use `-h` or `-V` for other things.
pub(super) static LAUNCHERS: &[Launcher] = &[
    // coreutils
    Launcher {
        names: &["env"],
        opts: "i,ignore-environment 0,null u,unset= C,chdir=@chdir S,split-string=@split v,debug \
               block-signal=? default-signal=? ignore-signal=? list-signal-handling \
               help@inert version@inert",
        dash: true,
        assignments: true,
        ..PREFIX
    },
    Launcher {
        names: &["nice"],
        opts: "n,adjustment= help@inert version@inert",
        numeric: true,
        ..PREFIX
    },
    Launcher {
        names: &["nohup"],
        opts: HELP,
        ..PREFIX
    },
    Launcher {
        names: &["timeout"],
        opts: "k,kill-after= s,signal= v,verbose preserve-status foreground help@inert version@inert",
        operands: &[Operand::Any],
        ..PREFIX
    },
    Launcher {
        names: &["stdbuf"],
        opts: "i,input= o,output= e,error= help@inert version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["chroot"],
        opts: "userspec= groups= skip-chdir help@inert version@inert",
        operands: &[Operand::Any],
        bare: Bare::Shell,
        ..PREFIX
    },
    Launcher {
        names: &["runcon"],
        opts: "c,compute u,user= r,role= t,type= l,range= help@inert version@inert",
        operands: &[Operand::Maybe],
        ..PREFIX
    },
    Launcher {
        names: &["time"],
        opts: "f,format= o,output=@writes a,append p,portability v,verbose q,quiet help@inert V,version@inert",
        ..PREFIX
    },
    // bash builtins that run their arguments
    Launcher {
        names: &["command"],
        opts: "p v@inert V@inert",
        ..PREFIX
    },
    Launcher {
        names: &["builtin"],
        ..PREFIX
    },
    Launcher {
        names: &["exec"],
        opts: "c l a=",
        ..PREFIX
    },
    // util-linux
    Launcher {
        names: &["setsid"],
        opts: "c,ctty f,fork w,wait h,help@inert V,version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["chrt"],
        opts: "b,batch d,deadline f,fifo i,idle o,other r,rr R,reset-on-fork T,sched-runtime= \
               P,sched-period= D,sched-deadline= a,all-tasks m,max@inert p,pid@inert v,verbose \
               h,help@inert V,version@inert",
        operands: &[Operand::Number],
        ..PREFIX
    },
    Launcher {
        names: &["taskset"],
        opts: "a,all-tasks p,pid@inert c,cpu-list h,help@inert V,version@inert",
        operands: &[Operand::Any],
        ..PREFIX
    },
    Launcher {
        names: &["ionice"],
        opts: "c,class= n,classdata= p,pid=@inert P,pgid=@inert u,uid=@inert t,ignore \
               h,help@inert V,version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["flock"],
        opts: "s,shared x,exclusive u,unlock n,nonblock,nb w,timeout,wait= E,conflict-exit-code= \
               o,close c,command=@script F,no-fork verbose h,help@inert V,version@inert",
        operands: &[Operand::Writes],
        permute: true,
        ..PREFIX
    },
    Launcher {
        names: &["script"],
        opts: "I,log-in=@writes O,log-out=@writes B,log-io=@writes T,log-timing=@writes \
               t,timing=?@writes m,logging-format= a,append c,command=@script e,return f,flush \
               force E,echo= o,output-limit= q,quiet h,help@inert V,version@inert",
        operands: &[Operand::Writes],
        permute: true,
        feed: Feed::Nothing,
        bare: Bare::Shell,
        ..PREFIX
    },
    Launcher {
        names: &["su"],
        opts: "m,p,preserve-environment w,whitelist-environment= g,group= G,supp-group= l,login \
               c,command=@script session-command=@script f,fast s,shell=@program P,pty \
               h,help@inert V,version@inert",
        operands: &[Operand::Any],
        permute: true,
        feed: Feed::ShellArgs,
        bare: Bare::Shell,
        dash: true,
        ..PREFIX
    },
    Launcher {
        names: &["runuser"],
        opts: "u,user=@argv m,p,preserve-environment w,whitelist-environment= g,group= \
               G,supp-group= l,login c,command=@script session-command=@script f,fast \
               s,shell=@program P,pty h,help@inert V,version@inert",
        operands: &[Operand::Maybe],
        permute: true,
        feed: Feed::ShellArgs,
        bare: Bare::Shell,
        dash: true,
        ..PREFIX
    },
    Launcher {
        names: &["setpriv"],
        opts: "d,dump@inert nnp,no-new-privs ambient-caps= inh-caps= bounding-set= ruid= euid= \
               rgid= egid= reuid= regid= clear-groups keep-groups init-groups groups= \
               securebits= pdeathsig= selinux-label= apparmor-profile= landlock-access= \
               landlock-rule= seccomp-filter= reset-env h,help@inert V,version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["unshare"],
        opts: "m,mount=? u,uts=? i,ipc=? n,net=? p,pid=? U,user=? C,cgroup=? T,time=? f,fork \
               map-user= map-group= r,map-root-user c,map-current-user map-auto map-users= \
               map-groups= kill-child=? mount-proc=? mount-binfmt=? propagation= setgroups= \
               keep-caps R,root=@chdir w,wd=@chdir S,setuid= G,setgid= monotonic= boottime= \
               l,load-interp= h,help@inert V,version@inert",
        bare: Bare::Shell,
        ..PREFIX
    },
    Launcher {
        names: &["nsenter"],
        opts: "a,all t,target= m,mount=? u,uts=? i,ipc=? n,net=? p,pid=? C,cgroup=? U,user=? \
               T,time=? S,setuid= G,setgid= preserve-credentials r,root=? w,wd=?@chdir \
               W,wdns= e,env F,no-fork Z,follow-context c,join-cgroup h,help@inert V,version@inert",
        bare: Bare::Shell,
        ..PREFIX
    },
    Launcher {
        names: &["prlimit"],
        opts: "p,pid=@inert o,output= noheadings raw verbose c,core=? d,data=? e,nice=? \
               f,fsize=? i,sigpending=? l,memlock=? m,rss=? n,nofile=? q,msgqueue=? r,rtprio=? \
               s,stack=? t,cpu=? u,nproc=? v,as=? x,locks=? y,rttime=? h,help@inert V,version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["setarch"],
        opts: "B,32bit F,fdpic-funcptrs I,short-inode L,addr-compat-layout R,addr-no-randomize \
               S,whole-seconds T,sticky-timeouts X,read-implies-exec Z,mmap-page-zero 3,3gb \
               4gb uname-2.6 v,verbose list@inert h,help@inert V,version@inert",
        operands: &[Operand::First],
        permute: true,
        bare: Bare::Shell,
        ..PREFIX
    },
    Launcher {
        names: &["linux32", "linux64", "i386", "x86_64", "uname26"],
        opts: "B,32bit F,fdpic-funcptrs I,short-inode L,addr-compat-layout R,addr-no-randomize \
               S,whole-seconds T,sticky-timeouts X,read-implies-exec Z,mmap-page-zero 3,3gb \
               4gb uname-2.6 v,verbose list@inert h,help@inert V,version@inert",
        bare: Bare::Shell,
        ..PREFIX
    },
    // findutils (find itself has an expression of its own: find.rs)
    Launcher {
        names: &["xargs"],
        opts: "0,null@null a,arg-file=@items d,delimiter=@delimiter E= e,eof=? I=@replace \
               i,replace=?@replace L,max-lines=@lines l=?@lines n,max-args= o,open-tty \
               p,interactive process-slot-var= P,max-procs= r,no-run-if-empty s,max-chars= \
               show-limits@inert t,verbose x,exit help@inert version@inert",
        feed: Feed::Items,
        ..PREFIX
    },
    // procps
    Launcher {
        names: &["watch"],
        opts: "b,beep c,color C,no-color d,differences=? e,errexit g,chgexit q,equexit= \
               n,interval= p,precise r,no-rerun s,shotsdir=? t,no-title w,no-wrap x,exec@argv \
               h,help@inert v,version@inert",
        feed: Feed::ShellWords,
        ..PREFIX
    },
    // GNU parallel (and its `sem`)
    Launcher {
        names: &["parallel"],
        opts: "0,null@null a,arg-file=@items d,delimiter=@delimiter E= e,eof=? I=@replace \
               replace=?@replace i=?@replace extensionreplace,er=@refuse basenamereplace,bnr=@refuse \
               dirnamereplace,dnr=@refuse basenameextensionreplace,bner=@refuse \
               seqreplace=@refuse slotreplace=@refuse rpl=@refuse plus@refuse \
               j,jobs,P,max-procs= n,max-args= N,max-replace-args= L,max-lines= l=? \
               s,max-chars= X,xargs m C,colsep=@columns k,keep-order g,group u,ungroup line-buffer,lb \
               tag tagstring= v,verbose t dry-run,dryrun eta progress bar no-notice will-cite \
               citation@inert q,quote@quote halt,halt-on-error= shuf pipe,spreadstdin \
               pipepart block,blocksize= recstart= recend= regexp header= cat fifo files \
               round-robin,round r,no-run-if-empty joblog=@writes results,res=@writes \
               tmpdir= workdir,wd=@chdir S,sshlogin= sshloginfile,slf= basefile,bf= \
               transfer,trc= return= cleanup env= timeout= retries= delay= memfree= load= \
               nice= termseq= limit= ssh=@script compress compress-program=@program \
               decompress-program=@program silent semaphore fg bg id= semaphorename= \
               semaphoretimeout,st= shebang shebang-wrap M,controlmaster onall nonall \
               output-as-files,outputasfiles,files0 resume resume-failed retry-failed \
               show-limits@inert number-of-cpus@inert number-of-cores@inert \
               number-of-threads@inert number-of-sockets@inert minversion=@inert \
               J,profile= noswap ungroup keep-order h,help@inert V,version@inert",
        feed: Feed::Parallel,
        ..PREFIX
    },
    Launcher {
        names: &["sem"],
        opts: "j,jobs,P,max-procs= fg bg id= semaphorename= semaphoretimeout,st= u,ungroup \
               line-buffer,lb tag will-cite no-notice wait@inert h,help@inert V,version@inert",
        feed: Feed::ShellWords,
        ..PREFIX
    },
    // privilege tools (denied by default; followed when a host lifts them)
    Launcher {
        names: &["sudo"],
        opts: "A,askpass b,background B,bell C,close-from= D,chdir=@chdir E,preserve-env=? \
               e,edit@refuse g,group= H,set-home h,host= i,login@login K,remove-timestamp@inert \
               k,reset-timestamp l,list@inert n,non-interactive N,no-update P,preserve-groups \
               p,prompt= R,chroot= r,role= S,stdin s,shell@login t,type= T,command-timeout= \
               U,other-user= u,user= V,version@inert v,validate@inert help@inert",
        ..PREFIX
    },
    Launcher {
        names: &["doas"],
        opts: "n s@login u= C=@inert L@inert",
        ..PREFIX
    },
    Launcher {
        names: &["pkexec"],
        opts: "user= disable-internal-agent keep-cwd help@inert version@inert",
        bare: Bare::Shell,
        ..PREFIX
    },
    Launcher {
        names: &["sg"],
        opts: "c",
        operands: &[Operand::Any],
        feed: Feed::ShellWords,
        dash: true,
        ..PREFIX
    },
    Launcher {
        names: &["newgrp"],
        operands: &[Operand::Any],
        feed: Feed::Nothing,
        bare: Bare::Shell,
        dash: true,
        ..PREFIX
    },
    Launcher {
        names: &["at", "batch"],
        opts: "V@inert q= f=@reads m M u= l@inert r@inert d@inert c@inert t= v b",
        feed: Feed::Nothing,
        bare: Bare::Shell,
        ..PREFIX
    },
    Launcher {
        names: &["capsh"],
        opts: "shell=@refuse",
        glued_long: true,
        feed: Feed::ShellArgs,
        ..PREFIX
    },
    Launcher {
        names: &["strace"],
        opts: "a= b= e= E= I= o=@writes O= p=@inert P= s= S= u= X= U= c C d D f F h@inert i k n \
               q r t T v V@inert w x y z Z output=@writes trace= signal= status= \
               summary-only summary follow-forks output-separately seccomp-bpf \
               string-limit= user= env= attach=@inert trace-path= timestamps=? \
               absolute-timestamps=? relative-timestamps=? syscall-times=? instruction-pointer \
               stack-trace decode-fds=? decode-pids=? quiet=? silent=? verbose= abbrev= raw= \
               read= write= inject= fault= kvm= columns= help@inert version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["ltrace"],
        opts: "a= A= b c C D= e= f F= h@inert i l= L n= o=@writes p=@inert r s= S t T u= V@inert \
               w= x= align= demangle library= output=@writes indent= help@inert version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["ssh"],
        opts: "4 6 A a C f G g K k M N n q s T t V@inert v X x Y y B= b= c= D= E=@writes e= \
               F=@reads I= i=@reads J= L= l= m= O= o=@ssh p= P= Q=@inert R= S= W= w=",
        operands: &[Operand::Any],
        feed: Feed::ShellWords,
        ..PREFIX
    },
    // other common launchers
    Launcher {
        names: &["busybox", "toybox"],
        opts: "list@inert list-full@inert install@inert help@inert",
        ..PREFIX
    },
    Launcher {
        names: &["unbuffer"],
        opts: "p",
        ..PREFIX
    },
    Launcher {
        names: &["entr"],
        opts: "a c d n p r s@shellwords x z",
        ..PREFIX
    },
    Launcher {
        names: &["start-stop-daemon"],
        opts: "S,start K,stop@inert T,status@inert H,help@inert V,version@inert \
               x,exec=@program a,startas=@program p,pidfile=@writes n,name= u,user= g,group= \
               s,signal= R,retry= c,chuid= r,chroot= d,chdir=@chdir N,nicelevel= P,procsched= \
               I,iosched= k,umask= b,background C,no-close O,output=@writes m,make-pidfile \
               remove-pidfile o,oknodo q,quiet t,test v,verbose notify-await notify-timeout= \
               ppid=",
        feed: Feed::Nothing,
        ..PREFIX
    },
    Launcher {
        names: &["systemd-run"],
        opts: "u,unit= p,property= description= slice= slice-inherit r,remain-after-exit \
               send-sighup service-type= uid= gid= nice= working-directory=@chdir d,same-dir \
               E,setenv= t,pty T,pty-late P,pipe S,shell@login q,quiet v,verbose json= \
               on-active= on-boot= on-startup= on-unit-active= on-unit-inactive= on-calendar= \
               on-timezone-change on-clock-change timer-property= path-property= \
               socket-property= user system H,host= M,machine= C,capsule= scope G,collect \
               wait no-block no-ask-password expand-environment= ignore-failure \
               background= h,help@inert version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["systemd-inhibit"],
        opts: "what= who= why= mode= list@inert no-pager no-legend no-ask-password \
               h,help@inert version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["dbus-run-session"],
        opts: "config-file=@reads dbus-daemon=@program help@inert version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["dbus-launch"],
        opts: "sh-syntax c-shell-syntax csh-syntax auto-syntax binary-syntax close-stderr \
               exit-with-session exit-with-x11 autolaunch= config-file=@reads help@inert \
               version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["xvfb-run"],
        opts: "a,auto-servernum d,auto-display e,error-file=@writes f,auth-file=@writes \
               n,server-num= l,listen-tcp s,server-args= w,wait= p,xauth-protocol= \
               h,help@inert",
        ..PREFIX
    },
    Launcher {
        names: &["ssh-agent"],
        opts: "c s D d k@inert a= E= O= P= t=",
        ..PREFIX
    },
    Launcher {
        names: &["fakeroot"],
        opts: "l,lib= faked=@program i=@reads s=@writes u,unknown-is-real b,fd-base= \
               h,help@inert v,version@inert",
        bare: Bare::Shell,
        ..PREFIX
    },
    Launcher {
        names: &[
            "eatmydata",
            "nocache",
            "torsocks",
            "torify",
            "catchsegv",
            "tini-static",
        ],
        opts: "",
        ..PREFIX
    },
    Launcher {
        names: &["proxychains", "proxychains4"],
        opts: "q f=@reads",
        ..PREFIX
    },
    Launcher {
        names: &["chronic"],
        opts: "e v",
        ..PREFIX
    },
    Launcher {
        names: &["ifne"],
        opts: "n",
        ..PREFIX
    },
    Launcher {
        names: &["pee"],
        opts: "ignore-sigpipe no-ignore-sigpipe ignore-write-errors no-ignore-write-errors",
        feed: Feed::EachScript,
        ..PREFIX
    },
    Launcher {
        names: &["lckdo"],
        opts: "q w W= s e",
        operands: &[Operand::Writes],
        ..PREFIX
    },
    Launcher {
        names: &["faketime"],
        opts: "m f p=@inert exclude-monotonic date-prog=@program h,help@inert v,version@inert",
        operands: &[Operand::Any],
        ..PREFIX
    },
    Launcher {
        names: &["trickle"],
        opts: "h@inert v V@inert s d= u= w= t= l= n=",
        ..PREFIX
    },
    Launcher {
        names: &["cpulimit"],
        opts: "l,limit= p,pid=@inert e,exe=@inert P,path=@inert i,include-children c,cpu= \
               z,lazy k,kill r,restore b,background m,monitor-forks q,quiet v,verbose \
               h,help@inert",
        ..PREFIX
    },
    Launcher {
        names: &["numactl"],
        opts: "a,all i,interleave= p,preferred= P,preferred-many= b,balancing m,membind= \
               N,cpunodebind= C,physcpubind= l,localalloc s,show@inert H,hardware@inert \
               w,weighted-interleave= h,help@inert V,version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["tini"],
        opts: "h@inert s p= v w g l@inert e=",
        ..PREFIX
    },
    Launcher {
        names: &["dumb-init"],
        opts: "c,single-child r,rewrite= v,verbose V,version@inert h,help@inert",
        ..PREFIX
    },
    Launcher {
        names: &["rlwrap"],
        opts: "a,always-readline=? A,ansi-colour-aware b,break-chars= c,complete-filenames \
               C,command-name= D,history-no-dupes= e,extra-char-after-completion= \
               E,always-echo f,file=@reads g,forget-matching= h,history-filename=@writes \
               H,history-filename=@writes i,case-insensitive I,pass-sigint-as-sigterm \
               l,logfile=@writes m,multi-line=? M,multi-line-ext= n,no-warnings \
               N,no-children o,one-shot O,only-cook= p,prompt-colour=? P,pre-given= \
               q,quote-characters= r,remember R,renice s,histsize= S,substitute-prompt= \
               t,set-term-name= U,mirror-arguments v,version@inert w,wait-before-prompt= \
               W,polling X,skip-setctty z,filter=@program",
        ..PREFIX
    },
    Launcher {
        names: &["valgrind"],
        opts: "q,quiet v,verbose h,help@inert help-debug@inert version@inert",
        glued_long: true,
        ..PREFIX
    },
    Launcher {
        names: &["firejail"],
        opts: "",
        glued_long: true,
        ..PREFIX
    },
    Launcher {
        names: &["gdb"],
        opts: "args@argv ex,eval-command=@gdb iex,init-eval-command=@gdb x,command=@reads \
               ix,init-command=@reads batch batch-silent q,quiet,silent nx,n nh \
               p,pid=@inert c,core= s,symbols= e,exec= se= d,directory= cd=@chdir \
               tty= readnow readnever write statistics configuration@inert \
               h,help@inert version@inert",
        feed: Feed::Nothing,
        single_dash_long: true,
        ..PREFIX
    },
    Launcher {
        names: &["bwrap"],
        opts: "args= argv0= unshare-all share-net unshare-user unshare-user-try unshare-ipc \
               unshare-pid unshare-net unshare-uts unshare-cgroup unshare-cgroup-try userns= \
               userns2= disable-userns assert-userns-disabled pidns= uid= gid= hostname= \
               chdir=@chdir clearenv setenv=2 unsetenv= lock-file= sync-fd= perms= size= \
               bind=2 bind-try=2 dev-bind=2 dev-bind-try=2 ro-bind=2 ro-bind-try=2 \
               bind-fd=2 ro-bind-fd=2 remount-ro= overlay-src= overlay=3 tmp-overlay= \
               ro-overlay= exec-label= file-label= proc= dev= tmpfs= mqueue= dir= file=2 \
               bind-data=2 ro-bind-data=2 symlink=2 seccomp= add-seccomp-fd= block-fd= \
               userns-block-fd= info-fd= json-status-fd= new-session die-with-parent \
               as-pid-1 cap-add= cap-drop= chmod=2 level-prefix help@inert version@inert",
        ..PREFIX
    },
    // project and package runners
    Launcher {
        names: &["npx", "pnpx", "bunx"],
        opts: "p,package= c,call=@script y,yes no q,quiet,silent s w,workspace= ws,workspaces \
               include-workspace-root prefix= registry= cache= loglevel= shell=@refuse \
               bun h,help@inert v,version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["npm", "pnpm", "yarn"],
        sub: &["exec", "x", "dlx"],
        opts: "p,package= c,call=@script y,yes no q,quiet,silent s w,workspace= ws,workspaces \
               include-workspace-root prefix= registry= cache= loglevel= shell=@refuse \
               r,recursive parallel C,dir=@chdir filter= h,help@inert",
        ..PREFIX
    },
    Launcher {
        names: &["uv"],
        sub: &["run"],
        opts: "with= with-editable= with-requirements=@reads p,python= project=@chdir \
               directory=@chdir m,module=@inert script s isolated no-project no-sync frozen \
               locked extra= all-extras no-extra= no-dev only-dev dev group= no-group= \
               only-group= all-groups no-default-groups env-file=@reads no-env-file q,quiet \
               v,verbose offline no-cache n color= native-tls index= default-index= \
               index-url= extra-index-url= f,find-links= no-build no-binary= reinstall \
               refresh package= all-packages exact no-editable gui-script active \
               python-preference= no-python-downloads config-file=@reads no-config \
               h,help@inert",
        ..PREFIX
    },
    Launcher {
        names: &["poetry"],
        sub: &["run"],
        opts: "P,project=@chdir C,directory=@chdir q,quiet v,verbose n,no-interaction \
               no-plugins no-cache ansi no-ansi h,help@inert V,version@inert",
        ..PREFIX
    },
    Launcher {
        names: &["pipenv"],
        sub: &["run"],
        opts: "python= clear v,verbose q,quiet system h,help@inert",
        ..PREFIX
    },
    Launcher {
        names: &["pdm"],
        sub: &["run"],
        opts: "l,list@inert j,json@inert s,site-packages p,project=@chdir g,global v,verbose \
               q,quiet r,recreate venv= h,help@inert",
        ..PREFIX
    },
    Launcher {
        names: &["conda", "mamba", "micromamba"],
        sub: &["run"],
        opts: "n,name= p,prefix= cwd=@chdir live-stream no-capture-output a,attach= \
               v,verbose q,quiet dev debug-wrapper-scripts h,help@inert",
        ..PREFIX
    },
    Launcher {
        names: &["bundle"],
        sub: &["exec"],
        opts: "gemfile=@reads keep-file-descriptors h,help@inert",
        ..PREFIX
    },
    Launcher {
        names: &["direnv"],
        sub: &["exec"],
        operands: &[Operand::Any],
        ..PREFIX
    },
];

/// Dynamic loaders: `ld-linux-x86-64.so.2 /usr/bin/curl` runs curl.
pub(super) static LOADER: Launcher = Launcher {
    names: &[],
    sub: &[],
    opts: "list@inert verify@inert inhibit-cache library-path= inhibit-rpath= audit= preload= \
           argv0= glibc-hwcaps-prepend= glibc-hwcaps-mask= list-tunables@inert \
           list-diagnostics@inert help@inert version@inert",
    ..PREFIX
};

/// Ordinary commands with an option whose value is a program, a script or a
/// file written: `sort --compress-program=PROG`, `split --filter=CMD`.
pub(super) static COMMAND_OPTIONS: &[(&[&str], &str)] = &[
    (
        &["sort"],
        "compress-program=@program o,output=@writes T,temporary-directory= S,buffer-size= \
         k,key= t,field-separator= files0-from=@reads batch-size= parallel= random-source=@reads",
    ),
    (
        &["split"],
        "filter=@script a,suffix-length= b,bytes= C,line-bytes= l,lines= n,number= \
         t,separator= additional-suffix= numeric-suffixes=? hex-suffixes=?",
    ),
    (
        &["install"],
        "strip-program=@program m,mode= o,owner= g,group= S,suffix= t,target-directory= Z,context=?",
    ),
    (
        &["man"],
        "P,pager=@script H,html=?@program C,config-file= M,manpath= S,s,sections= e,extension= \
         m,systems= L,locale= r,prompt= E,encoding= R,recode= p,preprocessor= \
         T,troff-device=? X,gxditview=?",
    ),
    (&["mapfile", "readarray"], "C=@script c= d= n= O= s= u= t"),
    (&["compgen"], "C=@script F= W= G= P= S= X= A= o="),
    (&["sdiff"], "diff-program=@program o,output=@writes"),
    (
        &["nix-shell"],
        "run=@script command=@script p,packages= I= arg=2 argstr=2 A,attr= E,expr=",
    ),
    (&["diff3"], "diff-program=@program"),
    // Network tools are denied by default; a host that lifts one still keeps
    // the files they write to the workspace.
    (
        &["curl"],
        "o,output=@writes output-dir=@writes D,dump-header=@writes c,cookie-jar=@writes \
         trace=@writes trace-ascii=@writes stderr=@writes etag-save=@writes libcurl=@writes \
         T,upload-file=@reads K,config=@reads b,cookie= d,data= data-binary= data-raw= \
         data-urlencode= F,form= H,header= u,user= x,proxy= A,user-agent= e,referer= \
         X,request= m,max-time= connect-timeout= retry= w,write-out= r,range= E,cert= \
         key= cacert= U,proxy-user= y,speed-time= Y,speed-limit= z,time-cond= C,continue-at= \
         Q,quote= resolve= connect-to=",
    ),
    (
        &["wget"],
        "O,output-document=@writes o,output-file=@writes a,append-output=@writes \
         P,directory-prefix=@writes save-cookies=@writes warc-file=@writes \
         i,input-file=@reads load-cookies=@reads e,execute= U,user-agent= header= \
         t,tries= T,timeout= w,wait= Q,quota= l,level= A,accept= R,reject= D,domains= \
         user= password= post-data= post-file=@reads body-file=@reads",
    ),
];

/// What the policy knows about a program name.
pub(super) enum Known {
    /// It runs another program.
    Launcher(&'static Launcher, Table),
    /// An ordinary command with options that matter.
    Options(Table),
}

/// What the policy knows about a program name, with its compiled options.
/// One hash lookup: a script names a command hundreds of times.
pub(super) fn lookup(name: &str) -> Option<&'static Known> {
    static BY_NAME: LazyLock<NameMap<Known>> = LazyLock::new(|| {
        let mut m = NameMap::default();
        for l in LAUNCHERS {
            for n in l.names {
                m.insert(*n, Known::Launcher(l, options::compile(l.opts).0));
            }
        }
        for (names, spec) in COMMAND_OPTIONS {
            for n in *names {
                m.insert(*n, Known::Options(options::compile(spec).0));
            }
        }
        m
    });
    static LOADER_OPTS: LazyLock<Known> =
        LazyLock::new(|| Known::Launcher(&LOADER, options::compile(LOADER.opts).0));
    if let Some(hit) = BY_NAME.get(name) {
        return Some(hit);
    }
    super::lists::is_dynamic_loader(name).then(|| &*LOADER_OPTS)
}

/// An option hit that matters to the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Hit {
    pub role: Role,
    /// The option as written (`-c`, `--chdir`).
    pub opt: String,
    /// Its value, when it has one.
    pub value: Option<Word>,
}

/// Why the command cannot be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Problem {
    /// An option the table does not know.
    Unknown(String),
    /// A word before the command that bash may split or drop, or an
    /// option only known at run time.
    Computed(String),
    /// An option whose effect the policy does not follow.
    Refused(String),
    /// Too many readings of computed words.
    TooMany,
}

/// What the words of a launcher say.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Parsed {
    /// Where the command starts; several when words before it are only
    /// known at run time and each reading is judged. `words.len()` when no
    /// command is given.
    pub starts: Starts,
    pub hits: Vec<Hit>,
    /// Operands the program writes (flock's lock file).
    pub writes: Vec<Word>,
    /// `env -S`: the split string and where the words after it start.
    pub split: Option<Box<(Word, usize)>>,
    pub problem: Option<Problem>,
}

/// The command's start in each reading: at most [`MAX_READINGS`], kept
/// inline (a launcher is parsed for every command it prefixes).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Starts {
    len: usize,
    at: [usize; MAX_READINGS],
}

impl Starts {
    fn contains(&self, i: usize) -> bool {
        self.as_slice().contains(&i)
    }

    fn push(&mut self, i: usize) {
        if let Some(slot) = self.at.get_mut(self.len) {
            *slot = i;
            self.len += 1;
        }
    }

    pub(super) fn as_slice(&self) -> &[usize] {
        &self.at[..self.len]
    }
}

impl Parsed {
    pub(super) fn has(&self, role: Role) -> bool {
        self.hits.iter().any(|h| h.role == role)
    }
}

/// Where the parse is.
#[derive(Debug, Clone, Copy)]
struct At {
    i: usize,
    operand: usize,
    /// After `--`: no more options.
    ended: bool,
}

/// At most this many readings of one launcher's words.
const MAX_READINGS: usize = 8;

/// Finds the command a launcher runs.
pub(super) fn parse(l: &Launcher, t: &Table, words: &[Word]) -> Parsed {
    let mut p = Parsed::default();
    let mut first = Some(At {
        i: first_word(l),
        operand: 0,
        ended: false,
    });
    // Other readings of computed words: rare, so allocated only then.
    let mut todo = Vec::new();
    let mut readings = 0;
    while let Some(at) = first.take().or_else(|| todo.pop()) {
        readings += 1;
        if readings > MAX_READINGS {
            p.problem = Some(Problem::TooMany);
            return p;
        }
        match reading(l, t, words, at, &mut p, &mut todo) {
            Some(start) if !p.starts.contains(start) => p.starts.push(start),
            Some(_) => {}
            None => return p,
        }
        if p.problem.is_some() || p.split.is_some() {
            return p;
        }
    }
    p
}

/// Follows one reading of the words to the command's start; other readings
/// of a computed word go to `todo`. `None` when the parse stops (a problem,
/// `env -S`).
fn reading(
    l: &Launcher,
    t: &Table,
    words: &[Word],
    mut at: At,
    p: &mut Parsed,
    todo: &mut Vec<At>,
) -> Option<usize> {
    loop {
        if !at.ended {
            at = options_from(l, t, words, at, p, todo)?;
        }
        let Some(kind) = l.operands.get(at.operand).copied() else {
            break;
        };
        let Some(w) = words.get(at.i) else { break };
        if w.may_split() {
            p.problem = Some(Problem::Computed(w.raw().to_string()));
            return None;
        }
        let present = match kind {
            Operand::Any | Operand::Writes => true,
            Operand::Number => w.dynamic || looks_numeric(&w.text),
            Operand::First => at.i == first_word(l) && !w.text.starts_with('-'),
            Operand::Maybe => {
                todo.push(At {
                    operand: at.operand + 1,
                    ..at
                });
                true
            }
        };
        if present {
            if kind == Operand::Writes {
                p.writes.push(w.clone());
            }
            at.i += 1;
        }
        at.operand += 1;
        if !l.permute {
            // Options end at the first operand.
            at.ended = true;
        }
    }
    if l.assignments {
        while let Some(w) = words.get(at.i) {
            if w.may_split() {
                p.problem = Some(Problem::Computed(w.raw().to_string()));
                return None;
            }
            // env takes any word with `=` as NAME=VALUE.
            if !w.text.contains('=') {
                break;
            }
            if w.dynamic && name_is_computed(w.raw()) {
                p.problem = Some(Problem::Computed(w.raw().to_string()));
                return None;
            }
            p.hits.push(Hit {
                role: Role::Assign,
                opt: w.text.clone(),
                value: None,
            });
            at.i += 1;
        }
    }
    Some(at.i)
}

/// Reads options from `at` to the first word that is not one.
fn options_from(
    l: &Launcher,
    t: &Table,
    words: &[Word],
    mut at: At,
    p: &mut Parsed,
    todo: &mut Vec<At>,
) -> Option<At> {
    while let Some(w) = words.get(at.i) {
        let text = w.text.as_str();
        if w.may_split() {
            p.problem = Some(Problem::Computed(w.raw().to_string()));
            return None;
        }
        if w.dynamic {
            if text.starts_with('-') {
                p.problem = Some(Problem::Computed(w.raw().to_string()));
                return None;
            }
            if at.operand < l.operands.len() {
                // An operand, or an option (a flag, or one with a value)
                // only known at run time: each reading is judged.
                todo.push(At { i: at.i + 1, ..at });
                todo.push(At { i: at.i + 2, ..at });
            }
            return Some(at);
        }
        if text == "--" {
            at.i += 1;
            at.ended = true;
            return Some(at);
        }
        if text == "-" && l.dash {
            at.i += 1;
            continue;
        }
        if !text.starts_with('-') || text == "-" {
            return Some(at);
        }
        let single = l.single_dash_long
            && text.len() > 2
            && !text.starts_with("--")
            && matches!(
                t.long(text[1..].split('=').next().unwrap_or("")),
                Long::Found(..)
            );
        let next = if let Some(long) = text.strip_prefix("--") {
            long_option(l, t, words, at.i, long, p)?
        } else if single {
            long_option(l, t, words, at.i, &text[1..], p)?
        } else {
            short_options(l, t, words, at.i, p)?
        };
        at.i = next;
        if p.split.is_some() {
            return None;
        }
    }
    Some(at)
}

/// One `--name[=value]`; returns the index after it and its values.
fn long_option(
    l: &Launcher,
    t: &Table,
    words: &[Word],
    i: usize,
    long: &str,
    p: &mut Parsed,
) -> Option<usize> {
    let w = &words[i];
    let (name, glued) = match long.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (long, None),
    };
    let (full, opt) = match t.long(name) {
        Long::Found(full, o) => (full, o),
        Long::Unknown | Long::Ambiguous
            if l.glued_long || (l.numeric && name.bytes().all(|b| b.is_ascii_digit())) =>
        {
            return Some(i + 1);
        }
        Long::Unknown | Long::Ambiguous => {
            p.problem = Some(Problem::Unknown(format!("--{name}")));
            return None;
        }
    };
    let shown = || format!("--{full}");
    let (value, next) = match (opt.arity, glued) {
        (Arity::Flag, Some(_)) => {
            // getopt refuses a value here: the program runs nothing.
            p.problem = Some(Problem::Unknown(w.text.clone()));
            return None;
        }
        (Arity::Flag, None) | (Arity::Optional, None) => (None, i + 1),
        (Arity::Required | Arity::Optional, Some(v)) => (Some(part_of(w, v)), i + 1),
        (Arity::Required, None) => (value_word(words, i + 1, p)?, i + 2),
        (Arity::Many(n), _) => many_values(words, i, n, p)?,
    };
    apply(opt, shown, value, next, p)?;
    Some(next)
}

/// One cluster of short options (`-xvf FILE`, `-n19`).
fn short_options(
    l: &Launcher,
    t: &Table,
    words: &[Word],
    i: usize,
    p: &mut Parsed,
) -> Option<usize> {
    let w = &words[i];
    let cluster = &w.text[1..];
    for (k, c) in cluster.char_indices() {
        let rest = &cluster[k + c.len_utf8()..];
        let Some(opt) = t.short(c) else {
            if l.numeric && c.is_ascii_digit() {
                return Some(i + 1);
            }
            p.problem = Some(Problem::Unknown(format!("-{c}")));
            return None;
        };
        let shown = || format!("-{c}");
        match opt.arity {
            Arity::Flag => apply(opt, shown, None, i + 1, p)?,
            Arity::Optional => {
                let value = (!rest.is_empty()).then(|| part_of(w, rest));
                apply(opt, shown, value, i + 1, p)?;
                return Some(i + 1);
            }
            Arity::Required if !rest.is_empty() => {
                apply(opt, shown, Some(part_of(w, rest)), i + 1, p)?;
                return Some(i + 1);
            }
            Arity::Required => {
                let value = value_word(words, i + 1, p)?;
                apply(opt, shown, value, i + 2, p)?;
                return Some(i + 2);
            }
            Arity::Many(n) => {
                let (value, next) = many_values(words, i, n, p)?;
                apply(opt, shown, value, next, p)?;
                return Some(next);
            }
        }
    }
    Some(i + 1)
}

/// The separate word after an option, which must not split.
fn value_word(words: &[Word], i: usize, p: &mut Parsed) -> Option<Option<Word>> {
    match words.get(i) {
        Some(v) if v.may_split() => {
            p.problem = Some(Problem::Computed(v.raw().to_string()));
            None
        }
        v => Some(v.cloned()),
    }
}

/// `n` separate values: the first is returned, the index after them too.
fn many_values(words: &[Word], i: usize, n: u8, p: &mut Parsed) -> Option<(Option<Word>, usize)> {
    let n = usize::from(n);
    for k in 1..=n {
        value_word(words, i + k, p)?;
    }
    Some((words.get(i + 1).cloned(), i + 1 + n))
}

/// A value glued to its option, as a word of its own.
fn part_of(w: &Word, text: &str) -> Word {
    Word {
        text: text.to_string(),
        raw: String::new(),
        ..w.clone()
    }
}

/// Records what an option means; `next` is the index after the option and
/// its values. `None` stops the parse.
fn apply(
    opt: Opt,
    shown: impl FnOnce() -> String,
    value: Option<Word>,
    next: usize,
    p: &mut Parsed,
) -> Option<()> {
    match opt.role {
        Role::None => {}
        Role::Refuse => {
            p.problem = Some(Problem::Refused(shown()));
            return None;
        }
        Role::Split => {
            // The split words take the place of the option and its value.
            p.split = Some(Box::new((value.unwrap_or_default(), next)));
        }
        Role::Script
        | Role::Program
        | Role::Inert
        | Role::Writes
        | Role::Reads
        | Role::Chdir
        | Role::Replace
        | Role::Login
        | Role::Argv
        | Role::ShellWords
        | Role::Items
        | Role::Null
        | Role::Delimiter
        | Role::Lines
        | Role::Columns
        | Role::Quote
        | Role::SshOption
        | Role::GdbCommand
        | Role::Assign => p.hits.push(Hit {
            role: opt.role,
            opt: shown(),
            value,
        }),
    }
    Some(())
}

/// The first word after the program's name (and subcommand).
fn first_word(l: &Launcher) -> usize {
    if l.sub.is_empty() { 1 } else { 2 }
}

/// Whether this launcher runs a command in this invocation, and from which
/// word its parse starts (the word before the subcommand, standing in for
/// the name): a launcher of subcommands only runs one for those, found
/// after any global options (`uv --directory d run …`).
pub(super) fn applies(l: &Launcher, words: &[Word]) -> Option<usize> {
    if l.sub.is_empty() {
        return Some(0);
    }
    let at = words
        .iter()
        .skip(1)
        .position(|w| l.sub.contains(&w.text.as_str()))?;
    Some(at)
}

fn looks_numeric(t: &str) -> bool {
    let t = t.strip_prefix(['-', '+']).unwrap_or(t);
    !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// `"$N"=x`: the part before the first `=`, as written, holds an expansion.
fn name_is_computed(raw: &str) -> bool {
    raw.split('=')
        .next()
        .is_some_and(|name| name.contains(['$', '`']))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<Word> {
        s.split(' ').map(Word::literal).collect()
    }

    fn launcher(name: &str) -> (&'static Launcher, &'static Table) {
        match lookup(name) {
            Some(Known::Launcher(l, t)) => (l, t),
            _ => panic!("no launcher for {name}"),
        }
    }

    fn start(cmd: &str) -> Parsed {
        let w = words(cmd);
        let (l, t) = launcher(&w[0].text);
        parse(l, t, &w)
    }

    #[test]
    fn every_spec_in_the_table_parses() {
        let mut seen = std::collections::HashSet::new();
        for l in LAUNCHERS.iter().chain([&LOADER]) {
            let (_, bad) = options::compile(l.opts);
            assert!(bad.is_empty(), "{:?}: {bad:?}", l.names);
            for n in l.names {
                assert!(seen.insert(*n), "{n} is in the table twice");
            }
        }
        for (names, spec) in COMMAND_OPTIONS {
            let (_, bad) = options::compile(spec);
            assert!(bad.is_empty(), "{names:?}: {bad:?}");
            for n in *names {
                assert!(seen.insert(*n), "{n} is in the table twice");
            }
        }
    }

    #[test]
    fn commands_are_found_behind_every_option_form() {
        for (cmd, at) in [
            ("timeout 5 rm x", 2),
            ("timeout -s KILL 5 rm x", 4),
            ("timeout -sKILL 5 rm x", 3),
            ("timeout --signal=KILL -k 1 5 rm x", 5),
            ("timeout --kill 1 5 rm x", 4),
            ("timeout --preserve-status --foreground 5 rm", 4),
            ("nice -n 19 rm", 3),
            ("nice -n19 rm", 2),
            ("nice -19 rm", 2),
            ("nice --adjustment=5 rm", 2),
            ("env -i -u X -C /tmp A=1 B=2 rm", 8),
            ("env - A=1 rm", 3),
            ("env -- A=1 rm", 3),
            ("chrt -f 10 rm", 3),
            ("chrt -o rm", 2),
            ("taskset -c 0-3 rm", 3),
            ("flock -w 5 /tmp/l rm", 4),
            ("flock /tmp/l -n rm", 3),
            ("setarch x86_64 -R rm", 3),
            ("setarch -R rm", 2),
            ("xargs -0rI{} rm {}", 2),
            ("xargs -I {} rm {}", 3),
            ("xargs -n1 -P4 -- rm", 4),
            ("xargs -a list rm", 3),
            ("xargs --arg-file=list -d , rm", 4),
            ("xargs -i rm {}", 2),
            ("xargs -e rm", 2),
            ("stdbuf -oL -eL rm", 3),
            ("ionice -c 3 rm", 3),
            ("sudo -u root -- rm", 4),
            ("su root -c x", 4),
            ("busybox rm -rf x", 1),
            ("valgrind --tool=memcheck --leak-check=full rm", 3),
        ] {
            let p = start(cmd);
            assert_eq!(p.problem, None, "{cmd}");
            assert_eq!(p.starts.as_slice(), [at], "{cmd}");
        }
    }

    #[test]
    fn unknown_options_stop_the_parse() {
        assert_eq!(
            start("timeout --frobnicate 5 rm").problem,
            Some(Problem::Unknown("--frobnicate".into()))
        );
        assert_eq!(
            start("nice -q rm").problem,
            Some(Problem::Unknown("-q".into()))
        );
        assert_eq!(
            start("parallel --plus rm ::: x").problem,
            Some(Problem::Refused("--plus".into()))
        );
    }

    #[test]
    fn computed_words_before_the_command() {
        let dynamic = |raw: &str, splits: bool| Word {
            dynamic: true,
            splits,
            raw: raw.to_string(),
            ..Word::default()
        };
        let (l, t) = launcher("timeout");
        // `timeout $T cargo test`: $T may be several words.
        let w = vec![
            Word::literal("timeout"),
            dynamic("$T", true),
            Word::literal("cargo"),
        ];
        assert_eq!(
            parse(l, t, &w).problem,
            Some(Problem::Computed("$T".into()))
        );
        // `timeout "$X" 5 rm`: "$X" may be the duration or an option.
        let w = vec![
            Word::literal("timeout"),
            dynamic("\"$X\"", false),
            Word::literal("5"),
            Word::literal("rm"),
        ];
        let mut starts = parse(l, t, &w).starts.as_slice().to_vec();
        starts.sort();
        assert_eq!(starts, vec![2, 3, 4]);
    }
}
