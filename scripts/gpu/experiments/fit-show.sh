for f in $OUT/r/run_*.jsonl; do echo "$(basename $f)"; python3 -c "
import json,sys
for l in open('$f'):
    d=json.loads(l)
    if 'summary' in d: continue
    print(d['generation'], round(d['best'],4), 'gen_ms', round(d['generation_ms'],1), 'fit_ms', round(d.get('fit_ms',0),1), 'gpu', round(d.get('fit_gpu_ms',0),1), 'worker', round(d.get('fit_worker_ms',0),1), 'fitted', d.get('fitted'), d.get('fitted_on_gpu'), 'evald', d['individuals']['evaluated'])
" | tail -4; done
