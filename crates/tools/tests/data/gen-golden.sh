#!/bin/bash
# Generates ncsa.golden and top.golden: what Varnish 7.1's varnishncsa and
# varnishtop print for the fixture log files (tests/golden.rs compares
# Lacquer's tools with them).
cd "$(dirname "$0")"
tool=varnishncsa
out=ncsa.golden
: > $out
case_() {
  file=$1; shift
  printf '### %s' "$file" >> $out
  for a in "$@"; do printf ' \x1f%s' "$a" >> $out; done
  printf '\n' >> $out
  $tool -r "$file" "$@" >> $out 2>&1
  printf '### end\n' >> $out
}
ALL='%b|%D|%H|%h|%I|%{X-W}i|%l|%m|%{Age}o|%O|%q|%r|%s|%t|%{%F %T}t|%T|%{ms}T|%{us}T|%U|%u|%{Varnish:time_firstbyte}x|%{Varnish:hitmiss}x|%{Varnish:handling}x|%{Varnish:side}x|%{Varnish:vxid}x|%{VCL_Log:quux}x|%{VCL_Log:k}x|%{VSL:Begin}x|%{VSL:Timestamp:Resp[2]}x|%{sec}t %{msec}t %{usec}t %{msec_frac}t %{usec_frac}t'
for f in varnish-u3.bin fields.bin escapes.bin controls.bin empty.bin; do
  case_ $f
  case_ $f -b
  case_ $f -b -c -F "$ALL"
  case_ $f -b -c -j -F "$ALL"
  case_ $f -g request -b -c -F '%{Varnish:side}x %{Varnish:vxid}x %s %r'
  case_ $f -q 'RespStatus >= 400' -F '%s %U'
done
case_ varnish-u3.bin -F '%{VSL:ReqHeader:host}x %{VSL:ReqHeader:Host[1]}x %{VSL:Timestamp[1]}x %{VSL:Begin[3]}x'
case_ varnish-u3.bin -F 'tab\there\nnew\\line'
case_ escapes.bin -F '"%{X-W}i" %u %{Authorization}i'
case_ escapes.bin -j -F '"%{X-W}i" %u %{Authorization}i'
case_ controls.bin -F '%{X-W}i'
case_ controls.bin -j -F '%{X-W}i'

tool=varnishtop
out=top.golden
: > $out
for f in varnish-u3.bin fields.bin escapes.bin controls.bin empty.bin; do
  case_ $f -1
  case_ $f -1 -f
  case_ $f -1 -b
  case_ $f -1 -c -i 'Req*' -x ReqHeader
  case_ $f -1 -f -I 'ReqHeader:^[Hh]' -C
  case_ $f -1 -g request -q 'RespStatus == 200'
done

tool=varnishlog
out=log.golden
: > $out
for f in varnish-u3.bin fields.bin escapes.bin controls.bin empty.bin; do
  case_ $f
  case_ $f -g raw
  case_ $f -g request -v
  case_ $f -g session -i 'Req*' -x ReqHeader
  case_ $f -b -I 'BereqHeader:^[Hh]' -C
  case_ $f -c -q 'RespStatus >= 400 or ReqURL ~ "^/x"'
  case_ $f -g raw -X 'Timestamp:Resp' -k 5
done
