#!/bin/bash
# Record real sacct text for issue 13's cases on lab `ah` (Slurm 22.05).
set -u
cd "$(dirname "$0")/../../.."
LAB=${1:-ah}
eval "$(tests/slurm_lab/slurm-lab --name "$LAB" env)"
export TZ=UTC SLURM_TIME_FORMAT=%Y-%m-%dT%H:%M:%S
T=$(date -u +%Y-%m-%dT%H:%M:%S)
sb() { sbatch --parsable -o /dev/null "$@"; }
J1=$(sb -A ml -p gpu --gres=gpu:h100:1 -J 'ah|pipe' --comment=$'team=ml\nproject=nl-last' --wrap 'sleep 1')
J2=$(sb -A ml -p gpu --gres=gpu:h100:1 -J $'ah\nname' --comment='team=ml|project=pipe-last' --wrap 'sleep 1')
J3=$(sb -A ml -p gpu --gres=gpu:h100:2 -J ah-comment-trailing-nl --comment=$'team=ml project=x\n' --wrap 'sleep 1')
J4=$(sb -A ml -p gpu --gres=gpu:h100:1 -J ah-array -a 0-2 --comment=$'arr\n|x' --wrap 'sleep 1; [ $SLURM_ARRAY_TASK_ID != 1 ]')
J5=$(sb -A ml -p gpu --gres=gpu:h100:1 -J ah-requeue --comment='team=ml' --requeue --wrap 'sleep 4')
J6=$(sb -A ml -p gpu --gres=gpu:h100:1 -J ah-het --comment=$'het\ncomment' --wrap 'sleep 1' : -p gpu --gres=gpu:h100:2 --wrap 'sleep 1' 2>/dev/null || sbatch --parsable -A ml -p gpu --gres=gpu:h100:1 -J ah-het --comment=$'het\ncomment' /dev/stdin <<'S'
#!/bin/bash
#SBATCH hetjob
#SBATCH -p gpu --gres=gpu:h100:2
sleep 1
S
)
J7=$(sb -A ml -p gpu --gres=gpu:h100:1 -J ah-running --comment='still running' --wrap 'sleep 300')
sleep 2
scontrol requeue "$J5"; sleep 1; scontrol update JobId="$J5" StartTime=now
echo "jobs: $J1 $J2 $J3 $J4 $J5 $J6 $J7"
for i in $(seq 1 40); do
  n=$(squeue -h -t PD,R,CG | grep -v "^ *$J7 " | wc -l)
  [ "$n" = 0 ] && break; sleep 1
done
sleep 6
F=JobID,JobIDRaw,JobName,User,Account,Partition,QOS,State,ExitCode,Submit,Eligible,Start,End,Elapsed,AllocTRES,NNodes,NodeList,WCKey,Comment
E=$(date -u -d '+1 min' +%Y-%m-%dT%H:%M:%S)
OUT=tests/data/accounting
sacct -a -D -X -S "$T" -E "$E" --parsable2 -o "$F" > $OUT/lab-holes-pipe.txt
sacct -a -D -X -S "$T" -E "$E" --parsable2 --delimiter=$'\x1f|\x1e' -o JobID,JobIDRaw,JobName,Comment,WCKey,User,Account,Partition,QOS,State,ExitCode,Submit,Eligible,Start,End,Elapsed,AllocTRES,NodeList,NNodes > $OUT/lab-holes-fetch.txt
echo "$T $E $J1 $J2 $J3 $J4 $J5 $J6 $J7" > /tmp/ah/record.ids
scancel "$J7"
cat -A $OUT/lab-holes-pipe.txt
